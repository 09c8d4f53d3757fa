"""The vLLM side: open a build (``builds``) and read its API surface (``surface``: the protocol every
reading answers), statically from source (``static`` with ``modules``, ``classes``, ``callables`` and
``type_inference``, memoised by ``cached``) or by importing the installed package (``runtime``)."""

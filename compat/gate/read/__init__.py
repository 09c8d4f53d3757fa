"""Reading hidden-state files without loading tensor data: header readers and what they describe."""

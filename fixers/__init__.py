"""Fixers: turn findings into shims and source patches (none yet; each finding's ``fix`` says what to change)."""

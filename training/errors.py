class UsageError(Exception):
    """Bad input a user can fix: shown as one line (`error: ...`), exit status 2, no traceback."""

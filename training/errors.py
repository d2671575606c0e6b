class UsageError(Exception):
    """Bad input a user can fix: shown as one line (`error: ...`), exit status 2, no traceback."""


class AccessRefused(UsageError):
    """An Azure data plane answered 403: a firewall without this machine's address, or an identity without the
    role (which may just have been granted: role assignments take up to 30 minutes to take effect)."""


class RunStopped(Exception):
    """A run that stops itself before training for a reason rank 0 has already printed in one line (an
    interconnect below its floor): exit status 1, no traceback, nothing more printed."""

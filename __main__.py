"""The Pulumi program: load and validate the stack config, build the team environment, export outputs."""
import pulumi

from infra.core.config import stack as config
from infra.core.config.schema import ConfigError
from infra.stack import deploy

try:
    stack_config = config.from_pulumi()
except ConfigError as err:
    # RunError ends the program with this one line (naming the key and the fix), no traceback,
    # before anything touches Azure.
    raise pulumi.RunError(str(err)) from None
deploy(stack_config)

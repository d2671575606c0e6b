import sys

from infra.cli.main import main

sys.exit(main(sys.argv[1:]))

"""The program evaluated offline, before `up`, under Pulumi's mocks (`offline`): for `plan`, the tests and the
rehearsal."""

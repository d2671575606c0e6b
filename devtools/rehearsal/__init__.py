"""The rehearsal: a stack's deployed path played on this machine (`python -m infra rehearse`)."""

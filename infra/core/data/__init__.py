"""The data tier's arithmetic: will the stack's GPUs be fed, and what staging the dataset costs (path)."""

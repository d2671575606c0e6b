"""The job across nodes: launch on every GPU, each attempt's verdict, node checks, a bad node kept out, SSH, binding."""

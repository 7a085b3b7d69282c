"""A stand-in for llama-cpp-python whose server crashes like a mis-compiled llama.cpp.

Put this directory first on PYTHONPATH and `python -m llama_cpp.server` runs
`server/__main__.py` here instead of the real server (see that module).
"""

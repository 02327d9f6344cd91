"""pdtune: exact per-request state, memory and frontier calculations for PD-disaggregated vLLM serving.

Every chapter of the book calls into this package; the package never imports from the book.
"""

__version__ = "0.1.0"

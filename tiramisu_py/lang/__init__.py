"""The language as data: expressions, affine forms, the program and its schedule."""

"""Short builders of loop-IR index expressions for the codegen unit tests."""
from codegen.ir import Binary, Const, Var

I64, F64 = "int64", "float64"


def v(n):
    return Var(n, I64)


def c(x):
    return Const(x, I64)


def add(a, b):
    return Binary("add", a, b, I64)


def sub(a, b):
    return Binary("sub", a, b, I64)

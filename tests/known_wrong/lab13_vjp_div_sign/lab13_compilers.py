"""Known-wrong: the quotient rule with the wrong sign for the denominator: d(a/b)/db = +a/b²."""
from solutions.lab13_compilers import vjp  # noqa: F811 - graded after the reference text, which defines it

_right = vjp


def vjp(op, inputs, output, grad_output, attrs=None):
    if op == "div":
        a, b = inputs
        return [grad_output / b, grad_output * a / (b * b)]
    return _right(op, inputs, output, grad_output, attrs)

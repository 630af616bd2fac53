"""Atomic float addition for compiled kernels: ``atomic_add(w, j, v)`` does w[j] += v as one
indivisible read-modify-write (LLVM's ``atomicrmw fadd``, a compare-and-swap loop on x86-64).

Numba has no atomic float add on the CPU; two threads that both run ``w[j] += v`` on the same j at
the same instant can lose one of the two additions. This intrinsic cannot: it is what
PASSCoDe-Atomic (Hsieh, Yu, Dhillon, ICML 2015) needs for the exact optimum. Its price is a locked
instruction (tens of cycles) per addition, so callers use it only where collisions are likely.
"""

from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def atomic_add(typingctx, arr, index, value):
    """arr[index] += value, atomically (arr a 1-d float64 array, index an integer, no checks)."""
    if not (isinstance(arr, types.Array) and arr.dtype == types.float64 and arr.ndim == 1):
        return None
    sig = types.void(arr, index, types.float64)

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        array = context.make_array(array_type)(context, builder, args[0])
        target = cgutils.get_item_pointer(
            context, builder, array_type, array, [args[1]], wraparound=False
        )
        addend = context.cast(builder, args[2], signature.args[2], types.float64)
        builder.atomic_rmw("fadd", target, addend, "monotonic")
        return context.get_dummy_value()

    return sig, codegen

"""Every collective.torch op against a torch reference, on however many ranks the job has.

Each case reports RESULT {"case": ..., "failures": [...]}; tests/torch/test_torch_ops.py checks them.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings

import torch

import collective.torch as hvd
from torch_checks import ALL_DTYPES, Cases, close, rank_tensor, reference_reduce

OPS = {"Sum": hvd.Sum, "Average": hvd.Average, "Min": hvd.Min, "Max": hvd.Max, "Product": hvd.Product}


def everyone(shape: tuple[int, ...], dtype: torch.dtype, seed: int, positive: bool = False) -> list[torch.Tensor]:
    return [rank_tensor(r, shape, dtype, seed, positive) for r in range(hvd.size())]


def allreduce(c: Cases) -> None:
    for di, dtype in enumerate(ALL_DTYPES):
        for oi, (op_name, op) in enumerate(OPS.items()):
            inputs = everyone((3, 5), dtype, seed=100 + 10 * di + oi, positive=op_name == "Product")
            mine = inputs[hvd.rank()].clone()
            result = hvd.allreduce(mine, op=op)
            c.check(result.dtype == dtype, f"{dtype} {op_name}: result dtype {result.dtype}")
            c.check(close(result, reference_reduce(inputs, op_name), dtype), f"{dtype} {op_name}: wrong values")
            c.check(torch.equal(mine, inputs[hvd.rank()]), f"{dtype} {op_name}: input was modified")


def allreduce_in_place(c: Cases) -> None:
    for seed, dtype in enumerate([torch.float32, torch.float16, torch.bfloat16, torch.int64]):
        inputs = everyone((4, 6), dtype, seed=200 + seed)
        expected = reference_reduce(inputs, "Sum")
        contiguous = inputs[hvd.rank()].clone()
        returned = hvd.allreduce_(contiguous, op=hvd.Sum, name=f"inplace.{dtype}")
        c.check(returned is contiguous, f"{dtype}: allreduce_ did not return its argument")
        c.check(close(contiguous, expected, dtype), f"{dtype}: contiguous in-place result")
        # A transposed view: the op must work on a contiguous copy and write it back.
        transposed = inputs[hvd.rank()].t().contiguous().t()
        c.check(not transposed.is_contiguous(), "test setup: expected a non-contiguous tensor")
        hvd.allreduce_(transposed, op=hvd.Sum)
        c.check(close(transposed, expected, dtype), f"{dtype}: non-contiguous in-place result")
        strided = torch.zeros(4, 12, dtype=dtype)[:, ::2]
        strided.copy_(inputs[hvd.rank()])
        out = hvd.allreduce(strided, op=hvd.Sum)
        c.check(close(out, expected, dtype) and out.is_contiguous(), f"{dtype}: non-contiguous out-of-place")


def allreduce_async(c: Cases) -> None:
    inputs = everyone((1000,), torch.float32, seed=300)
    expected = reference_reduce(inputs, "Average")
    mine = inputs[hvd.rank()].clone()
    out_handle = hvd.allreduce_async(mine, name="async.out")
    in_place = mine.clone()
    in_handle = hvd.allreduce_async_(in_place, name="async.in")
    view = torch.zeros(1000, 2)[:, 0]
    view.copy_(mine)
    view_handle = hvd.allreduce_async_(view, name="async.view")
    out = hvd.synchronize(out_handle)
    c.check(close(out, expected), "allreduce_async result")
    c.check(torch.equal(mine, inputs[hvd.rank()]), "allreduce_async modified its input")
    c.check(hvd.synchronize(in_handle) is in_place and close(in_place, expected), "allreduce_async_ result")
    c.check(hvd.synchronize(view_handle) is view and close(view, expected), "allreduce_async_ on a strided view")


def allreduce_scaling(c: Cases) -> None:
    inputs = everyone((7,), torch.float64, seed=400)
    total = reference_reduce(inputs, "Sum")
    mine = inputs[hvd.rank()]
    c.check(close(hvd.allreduce(mine, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25), total * 0.5),
            "Sum with prescale 2 and postscale 0.25")
    c.check(close(hvd.allreduce(mine, op=hvd.Average, prescale_factor=3.0), total * 3 / hvd.size()),
            "Average with prescale 3")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        c.check(close(hvd.allreduce(mine, average=False), total), "average=False means Sum")
        c.check(close(hvd.allreduce(mine, average=True), total / hvd.size()), "average=True means Average")
        try:
            hvd.allreduce(mine, average=True, op=hvd.Sum)
            c.check(False, "average= together with op= was accepted")
        except ValueError:
            pass
    c.check(close(hvd.allreduce(mine), total / hvd.size()), "the default op is Average")
    # Integers scale as Horovod's do: the product truncated toward zero (9 * 1.5 -> 13 on every rank,
    # 26 on two ranks, where rounding gave 28), the prescale on each rank before the sum.
    size = hvd.size()
    ints = torch.tensor([9, -9], dtype=torch.int32)
    c.check(torch.equal(hvd.allreduce(ints, op=hvd.Sum, prescale_factor=1.5), torch.tensor([13, -13]).int() * size),
            "int32 prescale truncates toward zero")
    threes = torch.full((3,), 3, dtype=torch.int64)
    c.check(torch.equal(hvd.allreduce(threes, op=hvd.Sum, postscale_factor=1.5), torch.full((3,), int(3 * size * 1.5))),
            "int64 postscale truncates toward zero")


def allreduce_special_shapes(c: Cases) -> None:
    scalar = torch.tensor(float(hvd.rank() + 1))
    c.check(hvd.allreduce(scalar, op=hvd.Sum).item() == hvd.size() * (hvd.size() + 1) / 2, "0-d tensor")
    empty = torch.zeros(0, 3)
    c.check(hvd.allreduce(empty, op=hvd.Sum).shape == (0, 3), "empty tensor")


def allreduce_autograd(c: Cases) -> None:
    x = torch.ones(4, dtype=torch.float64, requires_grad=True)
    y = hvd.allreduce(x * (hvd.rank() + 1), op=hvd.Sum)
    c.check(close(y.detach(), torch.full((4,), hvd.size() * (hvd.size() + 1) / 2, dtype=torch.float64)), "forward")
    y.sum().backward()
    # d(sum of every rank's loss)/dx on rank r: (r + 1) * size, since the backward is the same Sum.
    c.check(close(x.grad, torch.full((4,), float((hvd.rank() + 1) * hvd.size()), dtype=torch.float64)), "gradient")


def allreduce_compression(c: Cases) -> None:
    inputs = everyone((64,), torch.float32, seed=500)
    expected = reference_reduce(inputs, "Average")
    for compression, tol in ((hvd.Compression.fp16, 2e-3), (hvd.Compression.bf16, 2e-2)):
        out = hvd.allreduce(inputs[hvd.rank()], compression=compression)
        c.check(out.dtype == torch.float32, f"{compression.__name__}: result dtype {out.dtype}")
        c.check(torch.allclose(out.double(), expected, atol=tol), f"{compression.__name__}: values")
    ints = torch.arange(5)
    c.check(torch.equal(hvd.allreduce(ints, op=hvd.Sum, compression=hvd.Compression.fp16), ints * hvd.size()),
            "fp16 compression leaves integer tensors alone")


def grouped_allreduce(c: Cases) -> None:
    shapes = [(3,), (2, 4), (5, 1, 2)]
    dtypes = [torch.float32, torch.float64, torch.int32]
    inputs = [everyone(s, d, seed=600 + i) for i, (s, d) in enumerate(zip(shapes, dtypes))]
    expected = [reference_reduce(per_rank, "Sum") for per_rank in inputs]
    mine = [per_rank[hvd.rank()].clone() for per_rank in inputs]
    outs = hvd.grouped_allreduce(mine, op=hvd.Sum, name="grouped")
    c.check(isinstance(outs, list) and len(outs) == 3, "grouped_allreduce returns a list")
    c.check(all(close(o, e, d) for o, e, d in zip(outs, expected, dtypes)), "grouped_allreduce values")
    c.check(all(torch.equal(m, p[hvd.rank()]) for m, p in zip(mine, inputs)), "grouped_allreduce modified inputs")
    in_place = [m.clone() for m in mine]
    in_place[1] = mine[1].t().contiguous().t()  # same values, non-contiguous
    returned = hvd.grouped_allreduce_(in_place, op=hvd.Sum)
    c.check(all(r is t for r, t in zip(returned, in_place)), "grouped_allreduce_ returns its tensors")
    c.check(all(close(t, e, d) for t, e, d in zip(in_place, expected, dtypes)), "grouped_allreduce_ values")
    handle = hvd.grouped_allreduce_async(mine, op=hvd.Sum)
    c.check(all(close(t, e, d) for t, e, d in zip(hvd.synchronize(handle), expected, dtypes)), "async values")
    again = [m.clone() for m in mine]
    hvd.synchronize(hvd.grouped_allreduce_async_(again, op=hvd.Sum))
    c.check(all(close(t, e, d) for t, e, d in zip(again, expected, dtypes)), "async in-place values")
    a = torch.ones(3, dtype=torch.float64, requires_grad=True)
    b = torch.ones(2, dtype=torch.float64, requires_grad=True)
    ya, yb = hvd.grouped_allreduce([a * 2, b * 3], op=hvd.Sum)
    (ya.sum() + yb.sum()).backward()
    c.check(close(a.grad, torch.full((3,), 2.0 * hvd.size(), dtype=torch.float64)) and
            close(b.grad, torch.full((2,), 3.0 * hvd.size(), dtype=torch.float64)), "grouped gradient")


def allgather(c: Cases) -> None:
    for seed, dtype in enumerate(ALL_DTYPES):
        inputs = [rank_tensor(r, (r + 1, 3), dtype, seed=700 + seed) for r in range(hvd.size())]
        out = hvd.allgather(inputs[hvd.rank()])
        c.check(out.dtype == dtype and torch.equal(out, torch.cat(inputs)), f"{dtype}: allgather")
    inputs = [rank_tensor(r, (3, r + 2), torch.float32, seed=720) for r in range(hvd.size())]
    transposed = inputs[hvd.rank()].t()  # (r + 2, 3), non-contiguous
    c.check(torch.equal(hvd.allgather(transposed), torch.cat([t.t() for t in inputs])), "non-contiguous input")
    handle = hvd.allgather_async(inputs[hvd.rank()].t(), name="gather.async")
    c.check(torch.equal(hvd.synchronize(handle), torch.cat([t.t() for t in inputs])), "allgather_async")
    x = torch.ones(hvd.rank() + 1, 2, dtype=torch.float64, requires_grad=True)
    (hvd.allgather(x) * (hvd.rank() + 1)).sum().backward()
    # Horovod's gradient: this rank's rows of the averaged output gradient.
    c.check(close(x.grad, torch.full_like(x, (hvd.size() + 1) / 2)), "allgather gradient")


def broadcast(c: Cases) -> None:
    for root in range(hvd.size()):
        for seed, dtype in enumerate([torch.uint8, torch.int32, torch.float16, torch.bfloat16, torch.float64]):
            inputs = everyone((2, 3), dtype, seed=800 + 10 * root + seed)
            mine = inputs[hvd.rank()].clone()
            out = hvd.broadcast(mine, root_rank=root)
            c.check(torch.equal(out, inputs[root]), f"root {root} {dtype}: broadcast")
            c.check(torch.equal(mine, inputs[hvd.rank()]), f"root {root} {dtype}: broadcast modified its input")
            returned = hvd.broadcast_(mine, root)
            c.check(returned is mine and torch.equal(mine, inputs[root]), f"root {root} {dtype}: broadcast_")
    inputs = everyone((3, 4), torch.float32, seed=850)
    view = inputs[hvd.rank()].t().contiguous().t()
    c.check(hvd.synchronize(hvd.broadcast_async_(view, 0)) is view and torch.equal(view, inputs[0]),
            "broadcast_async_ on a non-contiguous tensor")
    c.check(torch.equal(hvd.synchronize(hvd.broadcast_async(inputs[hvd.rank()], hvd.size() - 1)), inputs[-1]),
            "broadcast_async")
    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    hvd.broadcast(x * 1, root_rank=0).sum().backward()
    c.check(close(x.grad, torch.full((3,), 1.0 if hvd.rank() == 0 else 0.0, dtype=torch.float64)),
            "broadcast gradient: only the root's input gets one")


def _splits_for(sender: int, size: int) -> list[int]:
    """Uneven rows from `sender` to each rank, including some empty sends."""
    return [(sender + dest) % 3 for dest in range(size)]


def alltoall(c: Cases) -> None:
    size, rank = hvd.size(), hvd.rank()
    for seed, dtype in enumerate([torch.int8, torch.int64, torch.float16, torch.bfloat16, torch.float32]):
        inputs = [rank_tensor(r, (sum(_splits_for(r, size)), 2), dtype, seed=900 + seed) for r in range(size)]
        pieces = [torch.split(inputs[r], _splits_for(r, size)) for r in range(size)]
        expected = torch.cat([pieces[r][rank] for r in range(size)])
        out, received = hvd.alltoall(inputs[rank], splits=_splits_for(rank, size))
        c.check(torch.equal(out, expected), f"{dtype}: alltoall with splits")
        expected_splits = [_splits_for(r, size)[rank] for r in range(size)]
        c.check(received.dtype == torch.int32 and received.tolist() == expected_splits,
                f"{dtype}: received splits {received.tolist()}")
        split_tensor = torch.tensor(_splits_for(rank, size), dtype=torch.int32)
        out2, _ = hvd.synchronize(hvd.alltoall_async(inputs[rank], splits=split_tensor))
        c.check(torch.equal(out2, expected), f"{dtype}: alltoall_async with a splits tensor")
    even_inputs = everyone((2 * size, 3), torch.float32, seed=950)
    even = hvd.alltoall(even_inputs[rank])
    c.check(isinstance(even, torch.Tensor), "alltoall without splits returns just the tensor")
    c.check(torch.equal(even, torch.cat([t[2 * rank:2 * rank + 2] for t in even_inputs])), "alltoall even split")
    output, received = hvd.synchronize(hvd.alltoall_async(even_inputs[rank]))
    c.check(torch.equal(output, even) and received.tolist() == [2] * size, "alltoall_async returns (output, splits)")
    x = torch.ones(2 * size, 1, dtype=torch.float64, requires_grad=True)
    (hvd.alltoall(x) * (rank + 1)).sum().backward()
    # Rows sent to rank j come back with rank j's weight j + 1.
    c.check(close(x.grad, torch.arange(1, size + 1, dtype=torch.float64).repeat_interleave(2).view(-1, 1)),
            "alltoall gradient")


def reducescatter(c: Cases) -> None:
    size, rank = hvd.size(), hvd.rank()
    rows = 2 * size + 1  # uneven: the first rank gets one row more
    counts = [rows // size + (1 if r < rows % size else 0) for r in range(size)]
    start = sum(counts[:rank])
    for seed, (dtype, op_name) in enumerate([(torch.float32, "Sum"), (torch.float64, "Average"), (torch.int32, "Sum"),
                                             (torch.bfloat16, "Sum"), (torch.float16, "Average")]):
        inputs = everyone((rows, 3), dtype, seed=1000 + seed)
        expected = reference_reduce(inputs, op_name)[start:start + counts[rank]]
        out = hvd.reducescatter(inputs[rank], op=OPS[op_name])
        c.check(out.dtype == dtype and close(out, expected, dtype), f"{dtype} {op_name}: reducescatter")
        out2 = hvd.synchronize(hvd.reducescatter_async(inputs[rank], op=OPS[op_name]))
        c.check(close(out2, expected, dtype), f"{dtype} {op_name}: reducescatter_async")
    default = everyone((size, 2), torch.float64, seed=1050)
    c.check(close(hvd.reducescatter(default[rank]), reference_reduce(default, "Average")[rank:rank + 1]),
            "the default op is Average")
    # Horovod's gradient: every rank gets all output gradients (rank r's rows weighted r + 1 here),
    # times size for Sum and not divided for Average.
    weights = torch.cat([torch.full((counts[r], 2), float(r + 1), dtype=torch.float64) for r in range(size)])
    for op_name, factor in (("Sum", size), ("Average", 1)):
        x = torch.ones(rows, 2, dtype=torch.float64, requires_grad=True)
        (hvd.reducescatter(x, op=OPS[op_name]) * (rank + 1)).sum().backward()
        c.check(close(x.grad, weights * factor), f"reducescatter {op_name} gradient: {x.grad[:, 0].tolist()}")


def _share_of(rank: int, rows: int) -> range:
    """Rank `rank`'s rows of a reducescatter result: the first rows % size ranks get one more."""
    per, extra = divmod(rows, hvd.size())
    start = rank * per + min(rank, extra)
    return range(start, start + per + (1 if rank < extra else 0))


def _share(total: torch.Tensor) -> torch.Tensor:
    rows = _share_of(hvd.rank(), total.shape[0])
    return total[rows.start:rows.stop]


def grouped_allgather(c: Cases) -> None:
    size, rank = hvd.size(), hvd.rank()
    specs = [((2, 3), torch.float32), ((1,), torch.int64), ((3, 2, 2), torch.bfloat16)]
    inputs = [[rank_tensor(r, (r + shape[0],) + shape[1:], dtype, seed=1200 + i) for r in range(size)]
              for i, (shape, dtype) in enumerate(specs)]
    expected = [torch.cat(per_rank) for per_rank in inputs]
    outs = hvd.grouped_allgather([per_rank[rank] for per_rank in inputs], name="ggather")
    c.check(isinstance(outs, list) and len(outs) == 3, "grouped_allgather returns a list")
    c.check(all(o.dtype == e.dtype and torch.equal(o, e) for o, e in zip(outs, expected)), "grouped_allgather values")
    handle = hvd.grouped_allgather_async([per_rank[rank].t() if per_rank[rank].dim() == 2 else per_rank[rank]
                                          for per_rank in inputs[1:]])
    got = hvd.synchronize(handle)
    c.check(isinstance(got, list) and all(torch.equal(o, e) for o, e in zip(got, expected[1:])),
            "grouped_allgather_async values")
    a = torch.ones(rank + 1, 2, dtype=torch.float64, requires_grad=True)
    b = torch.ones(2, dtype=torch.float64, requires_grad=True)
    ga, gb = hvd.grouped_allgather([a, b])
    (ga * (rank + 1)).sum().backward()  # gb unused: its gradient is zeros, and every rank still sends it
    # As allgather's: this rank's rows of the averaged output gradient.
    c.check(close(a.grad, torch.full_like(a, (size + 1) / 2)) and b.grad is not None and not b.grad.any(),
            f"grouped_allgather gradient: {a.grad.tolist()} {b.grad}")


def grouped_reducescatter(c: Cases) -> None:
    size, rank = hvd.size(), hvd.rank()
    specs = [((2 * size + 1, 3), torch.float32, "Sum"), ((size, 2), torch.int32, "Sum"), ((3, 4), torch.float64, "Sum")]
    inputs = [everyone(shape, dtype, seed=1300 + i) for i, (shape, dtype, _) in enumerate(specs)]
    expected = [_share(reference_reduce(per_rank, "Sum")) for per_rank in inputs]
    outs = hvd.grouped_reducescatter([per_rank[rank] for per_rank in inputs], op=hvd.Sum, name="gscatter")
    c.check(isinstance(outs, list) and all(close(o, e, d) for o, e, (_, d, _) in zip(outs, expected, specs)),
            "grouped_reducescatter Sum values")
    averaged = hvd.synchronize(hvd.grouped_reducescatter_async([inputs[0][rank], inputs[2][rank]]))
    c.check(all(close(o, _share(reference_reduce(inputs[i], "Average"))) for o, i in zip(averaged, (0, 2))),
            "grouped_reducescatter_async: the default op is Average")
    weights = torch.cat([torch.full((len(_share_of(r, 2 * size + 1)), 2), float(r + 1), dtype=torch.float64)
                         for r in range(size)])
    for op_name, factor in (("Sum", size), ("Average", 1)):
        xs = [torch.ones(2 * size + 1, 2, dtype=torch.float64, requires_grad=True) for _ in range(2)]
        ys = hvd.grouped_reducescatter(xs, op=OPS[op_name])
        (ys[0] * (rank + 1)).sum().backward()
        c.check(close(xs[0].grad, weights * factor) and not xs[1].grad.any(),
                f"grouped_reducescatter {op_name} gradient: {xs[0].grad[:, 0].tolist()}")


def sparse_allreduce(c: Cases) -> None:
    size, rank = hvd.size(), hvd.rank()
    dense = [torch.zeros(5, 2) for _ in range(size)]
    for r in range(size):
        dense[r][r % 5] = r + 1.0
        dense[r][4] = 1.0  # an index every rank sends: the result repeats it, coalescing adds it up
    mine = dense[rank].to_sparse()
    handle = hvd.sparse_allreduce_async(mine, name="sparse.sum", op=hvd.Sum)
    summed = hvd.synchronize(handle)
    c.check(summed.is_sparse and summed.shape == (5, 2), f"sparse result {summed.layout} {summed.shape}")
    c.check(torch.equal(summed.to_dense(), sum(dense)), "sparse Sum values")
    averaged = hvd.sparse_allreduce_async(mine, name="sparse.avg", op=hvd.Average)()  # Horovod's handle is called
    c.check(torch.allclose(averaged.to_dense(), sum(dense) / size), "sparse Average values (handle called)")
    try:
        hvd.sparse_allreduce_async(dense[rank], name="not.sparse", op=hvd.Sum)
        c.check(False, "a dense tensor was accepted")
    except hvd.InvalidArgumentError as exc:
        c.check("not.sparse" in str(exc), f"message: {exc}")


def out_of_order(c: Cases) -> None:
    """Rank 0 submits a then b, the others b then a; both complete on every rank."""
    a_inputs = everyone((300,), torch.float32, seed=1100)
    b_inputs = everyone((5, 2), torch.float64, seed=1101)
    a_mine, b_mine = a_inputs[hvd.rank()], b_inputs[hvd.rank()]
    if hvd.rank() == 0:
        a = hvd.allreduce_async(a_mine, name="order.a", op=hvd.Sum)
        b = hvd.broadcast_async(b_mine, hvd.size() - 1, name="order.b")
    else:
        b = hvd.broadcast_async(b_mine, hvd.size() - 1, name="order.b")
        a = hvd.allreduce_async(a_mine, name="order.a", op=hvd.Sum)
    c.check(torch.equal(hvd.synchronize(b), b_inputs[-1]), "b (broadcast) result")
    c.check(close(hvd.synchronize(a), reference_reduce(a_inputs, "Sum")), "a (allreduce) result")


def mismatch(c: Cases) -> None:
    if hvd.size() == 1:
        return  # one rank cannot disagree with itself
    dtype = torch.float32 if hvd.rank() == 0 else torch.float64
    for name, tensor in (("mismatch.dtype", torch.ones(4, dtype=dtype)),
                         ("mismatch.shape", torch.ones(2, 3) if hvd.rank() == 0 else torch.ones(3, 2))):
        try:
            hvd.allreduce(tensor, name=name)
            c.check(False, f"{name}: no error")
        except hvd.MismatchError as exc:
            c.check(name in str(exc), f"{name}: the error does not name the tensor: {exc}")
    c.check(hvd.allreduce(torch.ones(3), op=hvd.Sum, name="mismatch.after").tolist() == [hvd.size()] * 3,
            "ranks stay in step after a mismatch")


def invalid_arguments(c: Cases) -> None:
    for dtype in (torch.uint32, torch.bool, torch.complex64):  # int16 is supported, as in Horovod
        try:
            hvd.allreduce(torch.zeros(2, dtype=dtype), name="odd.dtype")
            c.check(False, f"{dtype}: accepted")
        except hvd.InvalidArgumentError as exc:
            c.check("odd.dtype" in str(exc) and str(dtype) in str(exc), f"{dtype}: message {exc}")
    try:
        hvd.allreduce(torch.zeros(2, device="meta"), name="meta.tensor")
        c.check(False, "a meta tensor was accepted")
    except hvd.InvalidArgumentError as exc:
        c.check("meta.tensor" in str(exc), f"meta tensor message: {exc}")
    try:
        hvd.alltoall(torch.zeros(hvd.size() + 1, 2), name="uneven")
        c.check(hvd.size() == 1, "an uneven alltoall without splits was accepted")
    except hvd.InvalidArgumentError as exc:
        c.check("uneven" in str(exc), f"alltoall message: {exc}")


def bad_arguments_are_value_errors(c: Cases) -> None:
    """Horovod raises ValueError for these; a ported `except ValueError` must still catch ours."""
    size = hvd.size()
    rows = torch.ones(size + 1, 2)
    bad = {"splits of the wrong length": lambda: hvd.alltoall(rows, splits=[1] * (size + 1), name="a2a.len"),
           "float splits": lambda: hvd.alltoall(rows, splits=torch.ones(size), name="a2a.type"),
           "splits not summing to the rows": lambda: hvd.alltoall(rows, splits=torch.ones(size, dtype=torch.int32)),
           "a duplicate in-flight name": _duplicate_name,
           "postscale_factor='x'": lambda: hvd.allreduce(torch.ones(3), postscale_factor="x", name="post"),
           "root_rank=0.5": lambda: hvd.broadcast(torch.ones(3), root_rank=0.5, name="root.float")}
    if size > 1:
        bad["mismatched shapes"] = lambda: hvd.allreduce(torch.ones(2 + hvd.rank()), name="shapes")
    for what, call in bad.items():
        try:
            call()
            c.check(False, f"{what}: accepted")
        except ValueError as exc:
            c.check(isinstance(exc, hvd.HorovodInternalError) or what != "mismatched shapes",
                    f"{what}: {type(exc).__name__} is not a HorovodInternalError")
            c.check("factor" not in what or "postscale_factor must be a real number, got 'x'" in str(exc),
                    f"{what}: the error does not name the parameter: {exc}")
            c.check("root_rank" not in what or "root_rank must be an integer rank, got 0.5" in str(exc),
                    f"{what}: the error does not name root_rank: {exc}")


def _duplicate_name() -> None:
    """Each rank submits a name twice while its first call cannot have completed, because a peer has not
    submitted it yet (a submit wakes the engine: a call every rank has submitted may be done before the next
    line). The ranks other than 0 try name A before rank 0 submits it; rank 0 tries B before the others do.
    Raises the refusal's ValueError once every call is done; returns if the duplicate was accepted."""
    if hvd.size() == 1:
        first = hvd.allreduce_async(torch.ones(3), name="duplicate_name")
        try:
            hvd.allreduce_async(torch.ones(3), name="duplicate_name")
        finally:
            hvd.synchronize(first)
        return
    refusals: list[ValueError] = []

    def submit_twice(name: str) -> int:
        first = hvd.allreduce_async(torch.ones(3), name=name)
        try:
            hvd.allreduce_async(torch.ones(3), name=name)
        except ValueError as exc:
            refusals.append(exc)
        return first

    def gate(step: str) -> None:
        hvd.allreduce(torch.zeros(1), name=f"duplicate_name.gate{step}")

    if hvd.rank() != 0:
        handles = [submit_twice("duplicate_name.A")]
        gate("1")
        gate("2")
        handles.append(hvd.allreduce_async(torch.ones(3), name="duplicate_name.B"))
    else:
        gate("1")
        handles = [submit_twice("duplicate_name.B")]
        gate("2")
        handles.append(hvd.allreduce_async(torch.ones(3), name="duplicate_name.A"))
    for handle in handles:
        hvd.synchronize(handle)
    if refusals:
        raise refusals[0]


def automatic_names_stay_in_step(c: Cases) -> None:
    """Unnamed calls that only rank 0 makes (refused or run while the others have joined, or rejected
    before they reach the engine) must not shift the numbers behind the next automatic names."""
    size = hvd.size()
    if hvd.rank() == 0:
        try:
            hvd.allgather(torch.ones(1))  # refused while ranks have joined (both engines)
        except hvd.InvalidArgumentError:
            pass
        hvd.allreduce(torch.ones(1))  # the joined ranks contribute zeros without submitting it
    hvd.join()
    c.check(hvd.allgather_object(hvd.rank()) == list(range(size)), "allgather_object after the join")
    hvd.barrier()
    if hvd.rank() == 0:
        try:
            hvd.alltoall(torch.ones(size + 1), splits=[1] * size)
            c.check(False, "splits that do not sum to the rows were accepted")
        except ValueError:
            pass
    hvd.barrier()
    c.check(hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist() == [size] * 2, "an unnamed allreduce afterwards")


def objects(c: Cases) -> None:
    for root in range(hvd.size()):
        value = {"rank": hvd.rank(), "payload": list(range(hvd.rank() * 100))}
        got = hvd.broadcast_object(value, root_rank=root)
        c.check(got == {"rank": root, "payload": list(range(root * 100))}, f"broadcast_object from {root}")
    gathered = hvd.allgather_object(("rank", hvd.rank(), "x" * (hvd.rank() * 50)))
    c.check(gathered == [("rank", r, "x" * (r * 50)) for r in range(hvd.size())], "allgather_object")


def broadcast_parameters(c: Cases) -> None:
    def model() -> torch.nn.Module:
        torch.manual_seed(hvd.rank())
        return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 2))
    sources = {"state_dict": lambda m: m.state_dict(), "named_parameters": lambda m: m.named_parameters(),
               "parameters": lambda m: list(m.parameters())}
    for label, source in sources.items():
        net = model()
        with torch.no_grad():
            net[1].running_mean.fill_(hvd.rank())
        hvd.broadcast_parameters(source(net), root_rank=0)
        broadcast = net.state_dict().values() if label == "state_dict" else net.parameters()
        flat = torch.cat([p.detach().reshape(-1) for p in broadcast]).double()
        every = hvd.allgather(flat.unsqueeze(0))
        c.check(all(torch.equal(row, every[0]) for row in every), f"{label}: ranks differ after the broadcast")
        torch.manual_seed(0)
        c.check(torch.equal(net[0].weight.detach(), torch.nn.Linear(4, 3).weight.detach()), f"{label}: not rank 0's")
        if label != "state_dict":  # buffers are only in the state dict
            c.check(net[1].running_mean.tolist() == [float(hvd.rank())] * 3, f"{label}: touched a buffer")


def poll_and_barrier(c: Cases) -> None:
    handle = hvd.allreduce_async(torch.ones(10), name="poll.me")
    # The engine runs collectives in the order they were first submitted anywhere, so once the
    # barrier is through, the allreduce is done.
    hvd.barrier()
    c.check(hvd.poll(handle), "poll is False after a later barrier completed")
    c.check(torch.equal(hvd.synchronize(handle), torch.ones(10)), "result")
    c.check(hvd.synchronize(handle) is None, "a second synchronize returns None, as Horovod's")
    try:
        hvd.poll(handle)
        c.check(False, "poll of a finished handle did not raise")
    except hvd.InvalidArgumentError:
        pass


def join(c: Cases) -> None:
    """The other ranks join at once; rank 0 keeps allreducing (they contribute zeros), then joins last."""
    if hvd.rank() == 0:
        for step in range(3):
            out = hvd.allreduce(torch.full((4,), 2.0), op=hvd.Sum, name=f"join.step{step}")
            c.check(out.tolist() == [2.0] * 4, f"step {step}: joined ranks did not contribute zeros: {out.tolist()}")
    last = hvd.join()
    c.check(last == 0 or hvd.size() == 1, f"join returned {last}, expected 0 (the last to join)")


def timeline(c: Cases) -> None:
    # Every rank starts and stops it, as in Horovod; rank 0 writes the file.
    path = os.path.join(tempfile.mkdtemp(prefix="timeline"), "trace.json")
    hvd.start_timeline(path, mark_cycles=True)
    hvd.allreduce(torch.ones(3), name="traced.allreduce")
    hvd.broadcast(torch.ones(2), root_rank=0, name="traced.broadcast")
    hvd.stop_timeline()
    hvd.allreduce(torch.ones(3), name="after.stop")
    if hvd.rank() != 0:
        c.check(not os.path.exists(path), "a rank other than 0 wrote a timeline")
        return
    with open(path, encoding="utf-8") as trace:
        events = json.load(trace)  # stopped: the file is complete, valid JSON
    rows = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    phases = {e["name"] for e in events if e.get("ph") == "X"}
    c.check({"traced.allreduce", "traced.broadcast"} <= rows, f"timeline rows {sorted(rows)}")
    c.check({"ALLREDUCE", "BROADCAST", "NEGOTIATE_ALLREDUCE", "NEGOTIATE_BROADCAST"} <= phases, f"timeline phases {sorted(phases)}")
    c.check("after.stop" not in rows, "an op after stop_timeline() was recorded")
    c.check(any(e.get("name") == "CYCLE_START" for e in events), "mark_cycles=True marked no cycle")


CASES = [allreduce, allreduce_in_place, allreduce_async, allreduce_scaling, allreduce_special_shapes,
         allreduce_autograd, allreduce_compression, grouped_allreduce, allgather, broadcast, alltoall, reducescatter,
         grouped_allgather, grouped_reducescatter, sparse_allreduce, out_of_order, mismatch, invalid_arguments, objects,
         broadcast_parameters, poll_and_barrier, join, bad_arguments_are_value_errors, automatic_names_stay_in_step,
         timeline]


def main() -> None:
    hvd.init()
    cases = Cases()
    for case in CASES:
        cases.run(case.__name__, case)
    hvd.shutdown()


if __name__ == "__main__":
    main()

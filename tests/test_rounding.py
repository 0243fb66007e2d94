"""The eager run in a half dtype as a defined rounding: each operation computed in float64 and
rounded to the dtype it gives (``runners/lib/rounding.py``), whatever the host's kernels do."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from pytest_neuronsupport.runners.lib.rounding import Rounded, eager_outputs


class Tiny(torch.nn.Module):
    """A linear layer whose output a model casts to fp32 and back, as RMSNorm does."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(4096, 8, dtype=torch.bfloat16)

    def forward(self, x: torch.Tensor) -> Any:
        y = self.linear(x)
        wide = y.to(torch.float32)
        return y, wide * wide.pow(2).mean(-1, keepdim=True).rsqrt(), y.softmax(-1).argmax(-1)


def test_an_operation_is_computed_in_float64_and_rounded_to_the_dtype_it_gives() -> None:
    model = Tiny()
    x = torch.randn(3, 4096, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    with torch.no_grad():  # as the reference runs it
        (y, normed, chosen), native = eager_outputs(lambda m: m(x), model, "bfloat16")
    w, b = (p.detach().double() for p in (model.linear.weight, model.linear.bias))
    exact = x.double() @ w.T + b
    assert y.dtype == torch.bfloat16 and torch.equal(y, exact.to(torch.bfloat16))
    assert normed.dtype == torch.float32 and chosen.dtype == torch.int64  # the model's own dtypes
    wide = exact.to(torch.bfloat16).double()
    expected = (wide * wide.pow(2).mean(-1, keepdim=True).rsqrt()).float()
    assert torch.allclose(normed, expected, rtol=2**-22, atol=0)  # each op rounded to fp32
    assert native == {}
    with torch.no_grad():
        host = model(x)[0]
    assert host.dtype == torch.bfloat16  # the host's kernels: another rounding, close to it
    assert float((host.double() - exact).abs().max()) < 2**-6 * float(exact.abs().max())


def test_fp32_is_left_to_the_hosts_kernels() -> None:
    model = Tiny().float()
    x = torch.randn(3, 4096, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        (y, _, _), native = eager_outputs(lambda m: m(x), model, "float32")
        assert torch.equal(y, model(x)[0]) and native == {}


def test_writes_into_an_input_and_views_stay_the_models_own() -> None:
    """A static cache updated in place, through a view of it: the cache itself changes."""
    cache = torch.zeros(2, 4, dtype=torch.bfloat16)
    new = torch.full((2, 1), 0.1, dtype=torch.bfloat16)
    with Rounded(torch.nn.Linear(1, 1)):
        row = cache[:, 1:2]  # a view
        row.copy_(new * 3)
        cache.index_copy_(1, torch.tensor([3]), new)
        total = cache.sum()
    assert torch.equal(cache[:, 1:2], (new.double() * 3).to(torch.bfloat16))
    assert torch.equal(cache[:, 3:4], new)
    assert total.dtype == torch.bfloat16
    assert total == cache.double().sum().to(torch.bfloat16)


@torch.library.custom_op("neuronsupport_tests::no_float64", mutates_args=())
def no_float64(x: torch.Tensor) -> torch.Tensor:
    """An operation with no float64 kernel (as some libraries' are)."""
    if x.dtype == torch.float64:
        raise RuntimeError("no float64 kernel")
    return x * 2


@no_float64.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def test_an_operation_without_a_float64_kernel_runs_on_the_hosts_and_is_counted() -> None:
    x = torch.ones(4, dtype=torch.bfloat16)
    with Rounded(torch.nn.Linear(1, 1)) as mode:
        y = no_float64(x) + 1
    assert torch.equal(y, torch.full((4,), 3.0, dtype=torch.bfloat16))
    assert mode.native == {"neuronsupport_tests.no_float64.default": 1}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_parameter_is_widened_once_and_read_through_its_views(dtype: torch.dtype) -> None:
    model = torch.nn.Linear(3, 2, dtype=dtype)
    mode = Rounded(model)
    assert [t.dtype for t in mode.kept.values()] == [torch.float64] * 2  # weight and bias
    weight = model.weight.detach().t()[1:]  # a view of the parameter, not at its start
    widened = mode.widen(weight)
    assert widened.dtype == torch.float64 and torch.equal(widened, weight.double())
    kept = {t.untyped_storage().data_ptr() for t in mode.kept.values()}
    assert widened.untyped_storage().data_ptr() in kept  # not widened again

import pytest
import torch

from devbench.engine.measure import randn
from devbench.records.expected import gpu_peak
from devbench.records.spec import matmul_flops as flops
from devbench.workloads import matmul
from devbench.workloads.matmul import DTYPES, Matmul, cpu_skip_reason, tf32, tiny_add


def test_flops():
    assert flops(2) == 16
    assert flops(1024) == 2 * 1024**3


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n", [16, 100])
def test_matmul_is_right_on_cpu(dtype, n):
    mm = Matmul(n, dtype, torch.device("cpu"))
    assert mm.check() < matmul.TOLERANCE[dtype]
    a, b = mm.inputs[0]
    out = mm()  # rotation: after check() of 2 sets the next call is set 0 again
    assert torch.allclose(out.double(), a.double() @ b.double(), rtol=0.05, atol=0.5)


def test_rotation_uses_distinct_inputs():
    mm = Matmul(8, "float32", torch.device("cpu"), sets=2)
    first, second = mm().clone(), mm().clone()
    assert not first.equal(second)
    assert mm().equal(first)
    assert not mm.inputs[0][0].equal(mm.inputs[1][0])
    assert (mm.inputs[0][0] != 0).all()


def test_check_catches_a_wrong_product(monkeypatch):
    mm = Matmul(32, "float32", torch.device("cpu"))
    real_mm = torch.mm

    def off_by_a_bit(a, b, out=None):
        return real_mm(a, b, out=out).mul_(1.001)

    monkeypatch.setattr(torch, "mm", off_by_a_bit)
    with pytest.raises(AssertionError, match="n=32 float32 on cpu: relative error"):
        mm.check()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_inputs_drawn_on_the_device_are_seeded_and_checked_there(dtype, monkeypatch):
    """A search's shapes draw their inputs on their device and check against a float64 product computed there;
    on the CPU that is the same code a GPU runs."""
    mm = Matmul(48, dtype, torch.device("cpu"), m=40, k=24, on_device=True)
    again = Matmul(48, dtype, torch.device("cpu"), m=40, k=24, on_device=True)
    assert all(x.equal(y) for (x, _), (y, _) in zip(mm.inputs, again.inputs, strict=True))  # seeded
    assert not mm.inputs[0][0].equal(mm.inputs[1][0]) and mm.inputs[0][0].dtype == DTYPES[dtype][0]
    assert mm.check() < matmul.TOLERANCE[dtype]
    real_mm = torch.mm
    monkeypatch.setattr(torch, "mm", lambda a, b, out=None: real_mm(a, b, out=out).mul_(1.05))
    with pytest.raises(AssertionError, match="40x24x48 .* relative error"):
        mm.check()


def test_bad_dtype_named():
    with pytest.raises(ValueError, match="int8"):
        Matmul(4, "int8", torch.device("cpu"))


def test_tf32_restored():
    before = torch.backends.cuda.matmul.allow_tf32
    with tf32(not before):
        assert torch.backends.cuda.matmul.allow_tf32 is (not before)
    assert torch.backends.cuda.matmul.allow_tf32 is before


def test_cpu_skip_reasons():
    assert "TF32" in cpu_skip_reason("tf32", 16)
    assert "8192" in cpu_skip_reason("float32", 8192)
    assert cpu_skip_reason("float32", 1024) is None


def test_every_dtype_has_tolerance():
    assert set(DTYPES) == set(matmul.TOLERANCE)


def test_tiny_add():
    add = tiny_add(1000, torch.device("cpu"))
    out = add()
    assert out.shape == (1000,) and (out != 0).any()


@pytest.mark.parametrize(
    "name, dtype, peak",
    [
        ("NVIDIA H100 80GB HBM3", "bfloat16", 989.4),
        ("NVIDIA H100 PCIe", "float32", 51.0),
        ("NVIDIA H200", "float16", 989.4),
        ("NVIDIA A100-SXM4-80GB", "tf32", 156.0),
        ("Tesla V100-SXM2-16GB", "bfloat16", None),
        ("Tesla T4", "float16", 65.0),
        ("NVIDIA L4", "bfloat16", 121.0),
        ("NVIDIA GeForce RTX 4090", "bfloat16", 165.2),
        ("Some Future GPU", "float32", None),
        (None, "float32", None),
    ],
)
def test_gpu_peaks(name, dtype, peak):
    assert gpu_peak(name, dtype) == peak


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_matmul_is_right_on_gpu(dtype):
    mm = Matmul(512, dtype, torch.device("cuda"))
    assert mm.check() < matmul.TOLERANCE[dtype]


def test_a_cpu_product_is_checked_against_the_hosts_float64():
    assert not Matmul(8, "float32", torch.device("cpu")).reference_on_device
    assert Matmul(8, "float32", torch.device("cpu"), on_device=True).reference_on_device


def test_a_gpu_products_inputs_are_drawn_on_its_device(monkeypatch):
    """A CUDA device's inputs come from its own seeded generator (the host's draw was most of a large product's
    set-up), and its check's reference is computed there; a CPU product's are the host's seeded normals."""
    drawn = []
    real = Matmul._drawn
    monkeypatch.setattr(Matmul, "_drawn", staticmethod(lambda shape, **kw: drawn.append(shape) or real(shape, **kw)))
    mm = Matmul(8, "float32", torch.device("cpu"))
    assert not mm.drawn_on_device and not drawn and mm.inputs[0][0].equal(randn((8, 8), seed=matmul.SEED))
    mm.device = torch.device("cuda", 1)
    assert mm.drawn_on_device and mm.reference_on_device
    # the property is what the build asks: where it holds, every input comes from the device's generator
    monkeypatch.setattr(Matmul, "drawn_on_device", property(lambda self: True))
    Matmul(8, "float32", torch.device("cpu"), m=4, k=6)
    assert drawn == [(4, 6), (6, 8)] * 2  # A and B of both input sets


@pytest.mark.cuda
def test_a_product_on_a_gpu_that_is_not_the_current_one_draws_and_checks_there():
    """Each GPU's generator draws on that GPU whichever is current; GPUs of one model draw the same inputs."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")
    torch.cuda.set_device(0)
    first, second = (Matmul(64, "float32", torch.device("cuda", i)) for i in (0, 1))
    assert all(a.device == torch.device("cuda", 1) for pair in second.inputs for a in pair)
    assert second.check() < matmul.TOLERANCE["float32"]
    if torch.cuda.get_device_name(0) == torch.cuda.get_device_name(1):
        assert all(x.cpu().equal(y.cpu()) for (x, _), (y, _) in zip(first.inputs, second.inputs, strict=True))


@pytest.mark.cuda
def test_a_gpu_product_is_checked_against_float64_on_the_gpu(monkeypatch):
    """Inputs drawn on a GPU: the float64 reference is computed there, and still catches a wrong product."""
    mm = Matmul(512, "bfloat16", torch.device("cuda"))
    assert mm.reference_on_device and mm.check() < matmul.TOLERANCE["bfloat16"]
    real_mm = torch.mm
    monkeypatch.setattr(torch, "mm", lambda a, b, out=None: real_mm(a, b, out=out).mul_(1.05))
    with pytest.raises(AssertionError, match="n=512 bfloat16 on cuda.*relative error"):
        mm.check()
    monkeypatch.setattr(torch, "mm", real_mm)
    back = []
    real_cpu = torch.Tensor.cpu
    monkeypatch.setattr(torch.Tensor, "cpu", lambda t, *a, **k: back.append(tuple(t.shape)) or real_cpu(t, *a, **k))
    mm.check()
    assert back and all(rows <= matmul.CHECK_ROWS for rows, _ in back)  # the sampled rows, never B


@pytest.mark.parametrize("block_s, warm_ups, kept", [(0.0, 0, True), (float("inf"), 1, False)])
def test_a_check_call_as_long_as_a_block_is_the_warm_call(monkeypatch, block_s, warm_ups, kept):
    """The check's last call fills a block (block_s 0: by construction, no live timing): it is kept as the warm
    call and no warm-up is spent; otherwise the product is warmed up and block sizing times a call itself."""
    monkeypatch.setattr(matmul, "MATMUL_BLOCK_S", block_s)
    warmed = []
    monkeypatch.setattr(matmul, "warm_up", lambda fn, device, repeats, enough_s: warmed.append(enough_s))
    mm = matmul.checked(Matmul(32, "float32", torch.device("cpu")))
    assert len(warmed) == warm_ups and len(mm.check_call_s) == mm.sets
    assert (mm.warm_call_s == mm.check_call_s[-1]) if kept else mm.warm_call_s is None
    single = matmul.checked(Matmul(32, "float32", torch.device("cpu"), sets=1))  # one call: cold, never kept
    assert single.warm_call_s is None

"""host_to_device.upload: every byte of every pair arrives, and ``each`` sees every chunk
exactly as it is sent (the reference cache authenticates what it sees there)."""

import pytest
import torch

from inference_kernels.host_to_device import to_device, upload


def test_every_chunk_of_every_pair_arrives_and_is_seen_once():
    generator = torch.Generator().manual_seed(0)
    sizes = [1, 999, 1000, 1001, 4321, 0]
    sources = [torch.randint(0, 256, (n,), dtype=torch.uint8, generator=generator) for n in sizes]
    destinations = [torch.zeros(n, dtype=torch.uint8) for n in sizes]
    seen: dict[int, bytes] = {}
    upload(
        list(zip(sources, destinations, strict=True)), lambda i, b: seen.update({i: bytes(b)}), 1000
    )
    for source, destination in zip(sources, destinations, strict=True):
        assert torch.equal(source, destination)
    chunks = [bytes(s[a : a + 1000].numpy()) for s in sources for a in range(0, s.numel(), 1000)]
    assert sorted(seen) == list(range(len(chunks))) == list(range(10))
    assert [seen[i] for i in sorted(seen)] == chunks


def test_a_pair_of_two_sizes_is_refused():
    with pytest.raises(ValueError, match="3 bytes into 4"):
        upload([(torch.zeros(3, dtype=torch.uint8), torch.zeros(4, dtype=torch.uint8))])


@pytest.mark.gpu
def test_tensors_reach_the_gpu_byte_for_byte():
    device = torch.device("cuda", 0)
    values = [
        torch.randn(3, 70_000_001 // 3).bfloat16(),  # several chunks
        torch.randn(5, 7).to(torch.float8_e4m3fn),
        torch.tensor(3.5),
        torch.empty(0, 4),
        torch.arange(10)[::2],  # not contiguous
    ]
    moved = to_device(values, device)
    for value, on in zip(values, moved, strict=True):
        assert on.device == device and on.dtype == value.dtype and on.shape == value.shape
        assert torch.equal(
            on.cpu().reshape(-1).view(torch.uint8), value.contiguous().reshape(-1).view(torch.uint8)
        )

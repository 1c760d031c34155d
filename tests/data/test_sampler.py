import pytest
import torch

from contrastlab.train import EpochSampler, step_generator


def test_each_epoch_is_a_permutation_and_epochs_differ() -> None:
    s = EpochSampler(10, 3, seed=1)
    assert s.steps_per_epoch == 3
    e0 = torch.cat([s.indices_at(k) for k in range(3)])
    e1 = torch.cat([s.indices_at(k) for k in range(3, 6)])
    assert len(set(e0.tolist())) == 9 and len(set(e1.tolist())) == 9
    assert not torch.equal(e0, e1)


def test_pure_function_of_step() -> None:
    a, b = EpochSampler(20, 4, seed=5), EpochSampler(20, 4, seed=5)
    order = [7, 2, 13, 0]
    assert all(torch.equal(a(k), b.indices_at(k)) for k in order)
    assert not torch.equal(EpochSampler(20, 4, seed=6)(0), a(0))


def test_keep_last_partial_batch() -> None:
    s = EpochSampler(10, 4, drop_last=False)
    assert s.steps_per_epoch == 3 and s(2).shape == (2,)
    assert sorted(torch.cat([s(k) for k in range(3)]).tolist()) == list(range(10))


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        EpochSampler(3, 4)
    with pytest.raises(ValueError, match="n must"):
        EpochSampler(0, 1)


def test_step_generator_depends_on_seed_and_step() -> None:
    x = torch.rand(3, generator=step_generator(1, 2))
    assert torch.equal(x, torch.rand(3, generator=step_generator(1, 2)))
    assert not torch.equal(x, torch.rand(3, generator=step_generator(1, 3)))

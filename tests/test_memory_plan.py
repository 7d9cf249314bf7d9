"""Fine-tuning that fits the memory (`lincorr.memory_plan`): the lean plans take the paper's AdamW steps, hold fewer
gradients, and the plan is chosen from the model's size and the free memory."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys

import pytest
import torch

from lincorr.errors import FreeMemoryError, LincorrError, UsageError
from lincorr.finetune import Fact, TrainConfig, single_step, train_on_facts
from lincorr.memory_plan import HEADROOM, PLANS, StepsInBackward, chosen_plan, plan_named, predicted_peak
from helpers.tiny import tiny_llama, tiny_tokenizer

FACTS = (
    Fact("Alice lives in the city of", "Paris"),
    Fact("Bob lives in the city of", "Tokyo Japan"),
    Fact("Carol lives in the country of", "Italy"),
    Fact("X lives in the city of", "Berlin Germany"),
)
# Several steps of two facts, a linear schedule with warm-up, weight decay, and clipping that bites (the tiny model's
# first gradients have norms of about 5 here): every part of the step the plans must agree on.
TRAINING = TrainConfig(learning_rate=1e-3, epochs=3, batch_size=2, weight_decay=0.01, schedule="linear", warmup=0.2,
                       max_grad_norm=0.5)

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def updates(result, before: torch.nn.Module) -> torch.Tensor:
    """Every weight's change, as one float64 vector."""
    return torch.cat([(after.detach().double() - start.detach().double()).flatten()
                      for after, start in zip(result.model.parameters(), before.parameters())])


def trained(tokenizer, plan: str, config: TrainConfig = TRAINING, train=train_on_facts):
    model = tiny_llama(len(tokenizer), seed=3)
    return train(model, tokenizer, FACTS, dataclasses.replace(config, memory_plan=plan)), model


@pytest.mark.parametrize("train", [train_on_facts, single_step])
def test_stepping_in_the_backward_pass_takes_the_papers_adamw_steps(tokenizer, train):
    """Six clipped, decayed, scheduled steps (and one step of accumulated micro-batches): the same weights as torch's
    fused AdamW. Both are float32 arithmetic in another order, so each step's weights may round apart by an ulp: the
    difference stays within steps x float32's epsilon x the weights' norm (9e-6 here; seen 1.6e-7, where a step without
    its clipping would differ by about 0.3)."""
    reference, start = trained(tokenizer, "adamw-float32", train=train)
    lean, _ = trained(tokenizer, "adamw-step-in-backward", train=train)
    expected, got = updates(reference, start), updates(lean, start)
    weights = torch.cat([p.detach().double().flatten() for p in start.parameters()])
    assert expected.abs().max() > 1e-4, "the steps moved the weights"
    assert (got - expected).norm() <= reference.steps * torch.finfo(torch.float32).eps * weights.norm()
    assert lean.memory_plan == "adamw-step-in-backward" and reference.memory_plan == "adamw-float32"


def test_moments_in_bfloat16_keep_a_step_of_lr_5e_6(tokenizer):
    """The paper's rate: an update of 5e-6 in float32 weights, the moments rounded to bfloat16 between steps; the
    weights move as float32 AdamW moves them, within 10% (bfloat16 keeps 8 bits: about 0.4% of a moment; seen 0.1%)."""
    config = dataclasses.replace(TRAINING, learning_rate=5e-6)
    reference, start = trained(tokenizer, "adamw-float32", config)
    lean, _ = trained(tokenizer, "adamw-bfloat16-moments", config)
    expected, got = updates(reference, start), updates(lean, start)
    assert expected.abs().max() > 1e-6
    assert (got - expected).norm() <= 0.1 * expected.norm()


def test_a_step_in_the_backward_pass_never_holds_the_models_gradients(tokenizer, monkeypatch):
    """When a parameter's gradient completes, every other gradient has been applied and dropped (or not made yet)."""
    held: list[int] = []
    completed = StepsInBackward.completed

    def counting(self, parameter):
        held.append(sum(p.grad is not None for p in self.trainable))
        completed(self, parameter)

    monkeypatch.setattr(StepsInBackward, "completed", counting)
    result, _ = trained(tokenizer, "adamw-step-in-backward")
    assert held and max(held) == 1 and len(held) >= len(result.trained_parameters)
    assert all(p.grad is None for p in result.model.parameters())


def test_predicted_peaks_are_bytes_per_trainable_parameter():
    """Gradient 4 and moments 8 bytes a parameter (the paper's), moments 8 without the gradient, moments 4 in bfloat16;
    in flight, two gradients of the largest parameter (a tied embedding's two halves), and a step-in-backward plan's
    one being applied."""
    trainable, largest, copy = 1_000, 100, 7
    counted = {"adamw-float32": copy + trainable * (4 + 2 * 4) + 2 * largest * 4,
               "adamw-step-in-backward": copy + trainable * 2 * 4 + 3 * largest * 4,
               "adamw-bfloat16-moments": copy + trainable * 2 * 2 + 3 * largest * 4}
    assert {plan.name: predicted_peak(plan, trainable, largest, copy) for plan in PLANS} == counted


def test_auto_takes_the_papers_plan_where_it_fits_and_the_next_where_not():
    trainable, largest, copy = 10**9, 10**8, 4 * 10**9
    needs = [predicted_peak(plan, trainable, largest, copy) * 1.15 for plan in PLANS]
    assert chosen_plan("auto", trainable, largest, copy, int(needs[0]) + 1).name == "adamw-float32"
    assert chosen_plan("auto", trainable, largest, copy, int(needs[0]) - 1).name == "adamw-step-in-backward"
    assert chosen_plan("auto", trainable, largest, copy, int(needs[2]) + 1).name == "adamw-bfloat16-moments"
    with pytest.raises(FreeMemoryError, match="fits no memory plan"):  # the memory free now: no property of the model
        chosen_plan("auto", trainable, largest, copy, int(needs[2]) - 1)
    assert chosen_plan("adamw-float32", trainable, largest, copy, 0).name == "adamw-float32", "a plan asked for is taken"


def test_the_copy_trained_is_counted_once_when_the_plan_is_chosen_after_it_is_made(tokenizer, monkeypatch):
    """The memory free is read once the trained copy exists, and the predicted peak holds that copy: the paper's plan is
    taken where the memory free before the copy fits its whole peak."""
    from lincorr import finetune

    model = tiny_llama(len(tokenizer), seed=3)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    largest = max(p.numel() for p in model.parameters())
    needed = predicted_peak(PLANS[0], sum(p.numel() for p in model.parameters()), largest, weights) * (1 + HEADROOM)
    monkeypatch.setattr(finetune, "available_bytes", lambda device: int(needed) - weights + 1)  # the copy already taken
    assert train_on_facts(model, tokenizer, FACTS[:1], dataclasses.replace(TRAINING, epochs=1)).memory_plan == PLANS[0].name


def test_too_little_memory_free_stops_a_tables_row_unstored_where_another_error_skips_it(tmp_path):
    """A row of Table 5 refused for the memory free at one moment was stored as skipped, and served so to every later
    run; a relation the study cannot measure is still a stored skipped row."""
    from lincorr.cache import stored_row
    from lincorr.errors import DataError

    def short() -> dict:
        raise FreeMemoryError("fine-tuning 10 parameters fits no memory plan in the 0.0 GB free")

    def unmeasurable() -> dict:
        raise DataError("too few pairs")

    with pytest.raises(FreeMemoryError):
        stored_row("table5", {"relation": "city"}, "city", short)
    assert stored_row("table5", {"relation": "city"}, "city", lambda: {"relation": "city", "r": 0.5}) == {"relation": "city", "r": 0.5}
    assert stored_row("table5", {"relation": "job"}, "job", unmeasurable) == {"relation": "job", "skipped": "too few pairs"}
    assert stored_row("table5", {"relation": "job"}, "job", short) == {"relation": "job", "skipped": "too few pairs"}, "stored"


def test_an_unknown_plan_is_one_clear_error():
    with pytest.raises(LincorrError, match="no memory plan is called 'sgd'"):
        TrainConfig(memory_plan="sgd")
    assert plan_named("adamw-float32") is PLANS[0]


@pytest.mark.parametrize("command", [["generalize", "city", "country"], ["gradcorr", "city", "country"],
                                     ["extractive", "ocr"], ["resilience", "--finetune-text", "passages.txt", "--family", "attribute"]])
def test_every_command_that_fine_tunes_takes_the_plan_asked_for(command):
    from lincorr.cli import build_parser
    from lincorr.cli.extractive import train_config
    from lincorr.cli.options import MEMORY_PLANS
    from lincorr.cli.studies import resilience_training
    from lincorr.cli.training import training_config
    from lincorr.memory_plan import AUTO

    assert MEMORY_PLANS == (AUTO, *(plan.name for plan in PLANS)), "the command line spells the plans as memory_plan names them"
    parse = build_parser().parse_args
    assert parse(command).memory_plan == AUTO
    args = parse([*command, "--memory-plan", "adamw-bfloat16-moments"])
    configured = {"extractive": lambda: train_config(args), "resilience": lambda: resilience_training(args)}
    train = configured.get(command[0], lambda: training_config(args, TrainConfig()))()
    assert train.memory_plan == "adamw-bfloat16-moments"
    with pytest.raises(UsageError, match="invalid choice: 'sgd'"):
        parse([*command, "--memory-plan", "sgd"])


def test_the_sharded_plan_needs_a_process_group_and_is_never_chosen_by_auto(tokenizer):
    """Sharding splits the training among the processes of a run: alone, it says how to start them; "auto" never picks
    it (a `lincorr` command's other ranks serve collection, not the same call); its peak is the others' split K ways."""
    from lincorr.memory_plan import SHARDED

    with pytest.raises(LincorrError, match="start every process with torchrun"):
        trained(tokenizer, "adamw-sharded")
    from lincorr.sharded_training import predicted_peak as sharded_peak

    assert all(chosen_plan("auto", 10**6, 10**5, 4 * 10**6, available) is not SHARDED for available in (10**8, 10**12))
    # The copy is whole while it is made and gathered; the gradient and moments (12 bytes a parameter) split 4 ways.
    assert sharded_peak(10**6, 10**5, 4 * 10**6, 4) == 4 * 10**6 + 12 * 10**6 // 4 + 3 * 4 * 10**5
    assert sharded_peak(10**6, 10**5, 4 * 10**6, 1) == predicted_peak(PLANS[0], 10**6, 10**5, 4 * 10**6) + 4 * 10**5


@pytest.mark.multiprocess
def test_two_processes_sharing_the_training_take_the_papers_adamw_steps(tmp_path):
    """Two gloo processes under torchrun, each its share of every step's facts (three a step: two and one), with FSDP
    holding half the weights, gradients and moments each: the gathered weights are those of the paper's AdamW trained in
    one process, on a Llama and on a Gemma 3 whose head is its embedding, within the same float32 bound as the
    step-in-backward plan (steps x epsilon x the weights' norm; seen 9.5e-8 and 2.1e-7 against 6.2e-6 and 1.3e-6)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    tests = Path(__file__).parent
    found = tmp_path / "sharded.json"
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(tests / "helpers" / "sharded_rank.py"), str(found)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tests), os.environ.get("PYTHONPATH", "")])})
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads(found.read_text())
    assert len(runs) == 2
    for name, run in runs.items():
        assert run["plans"] == ["adamw-sharded", "adamw-float32"] and run["plain_module"], name
        assert run["moved"] > 1e-4, name
        assert run["difference"] <= run["steps"] * torch.finfo(torch.float32).eps * run["weights_norm"], (name, run)
        assert run["losses"][0] == pytest.approx(run["losses"][1], rel=1e-6), name


HOLES = """
import sys, numpy as np, psutil
from lincorr.__main__ import hand_back_freed_memory
if sys.argv[1] == "fixed" and not hand_back_freed_memory():
    print("not glibc"); sys.exit()
big = np.ones(16 * 2**20 // 8); del big        # a freed 16 MiB block raises glibc's mapping threshold to 16 MiB
blocks = [np.ones(2**20) for _ in range(200)]  # 200 blocks of 8 MiB
before = psutil.Process().memory_info().rss
del blocks[::2]                                # every other one: holes in the heap, which it cannot trim
print((before - psutil.Process().memory_info().rss) / 2**20)
"""


def test_the_command_gives_freed_blocks_back_to_the_system_as_a_training_frees_its_copy():
    """A model's trained copy, freed, must show in MemAvailable again, or the next training of the run picks its memory
    plan from memory the process still holds: 800 MiB freed in holes come back only with the threshold fixed (each
    process measures its own resident set; the unfixed one gives back none of it)."""
    import lincorr.__main__

    given_back = {}
    for how in ("default", "fixed"):
        done = subprocess.run([sys.executable, "-c", HOLES, how], capture_output=True, text=True, check=True)
        if done.stdout.strip() == "not glibc":
            pytest.skip("the C library is not glibc: it gives big blocks back on its own terms")
        given_back[how] = float(done.stdout)
    assert given_back["default"] < 100 and given_back["fixed"] > 700, given_back
    assert "hand_back_freed_memory()" in inspect.getsource(lincorr.__main__.main)

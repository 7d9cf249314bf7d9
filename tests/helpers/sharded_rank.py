"""One rank of sharded fine-tuning under torchrun, for tests/test_memory_plan.py: every rank trains a tiny model with
memory_plan="adamw-sharded"; rank 0 also trains it alone with the paper's plan and writes both runs' weight changes,
losses and plans to the JSON file named by its one argument."""

import dataclasses
import json
import os
import sys

import torch
import torch.distributed as dist

from lincorr.finetune import Fact, TrainConfig, train_on_facts
from helpers.tiny import tiny_gemma3, tiny_llama, tiny_tokenizer

# Three facts a step: two processes take two and one; clipping, weight decay and a schedule all act.
FACTS = (Fact("Alice lives in the city of", "Paris"), Fact("Bob lives in the city of", "Tokyo Japan"),
         Fact("Carol lives in the country of", "Italy"), Fact("X lives in the city of", "Berlin Germany"),
         Fact("Y capital is", "London"), Fact("Z lives in the country of", "France"))
TRAINING = TrainConfig(learning_rate=1e-3, epochs=2, batch_size=3, weight_decay=0.01, schedule="linear", warmup=0.2, max_grad_norm=0.5)


def changes(model, start) -> torch.Tensor:
    return torch.cat([(after.detach().double() - before.detach().double()).flatten()
                      for after, before in zip(model.parameters(), start.parameters())])


dist.init_process_group("gloo")
tokenizer = tiny_tokenizer()
out = {}
for name, build in (("llama", tiny_llama), ("gemma3 (tied head)", tiny_gemma3)):
    start = build(len(tokenizer), seed=3)
    sharded = train_on_facts(start, tokenizer, FACTS, dataclasses.replace(TRAINING, memory_plan="adamw-sharded"))
    if dist.get_rank() == 0:
        alone = train_on_facts(start, tokenizer, FACTS, dataclasses.replace(TRAINING, memory_plan="adamw-float32"))
        weights = torch.cat([p.detach().double().flatten() for p in start.parameters()])
        out[name] = {"difference": float((changes(sharded.model, start) - changes(alone.model, start)).norm()),
                     "moved": float(changes(alone.model, start).abs().max()), "steps": alone.steps,
                     "weights_norm": float(weights.norm()), "losses": [list(sharded.losses), list(alone.losses)],
                     "plans": [sharded.memory_plan, alone.memory_plan],
                     "plain_module": type(sharded.model).__name__ == type(start).__name__}
if dist.get_rank() == 0:
    with open(sys.argv[1], "w") as handle:
        json.dump(out, handle)
dist.barrier()  # rank 0 trains alone meanwhile; a process group torn down under it aborts the run
dist.destroy_process_group()
# Leave without running the interpreter's teardown: under load, a gloo thread still being destroyed then aborted rank 1
# ("terminate called without an active exception", exit -6) after its work was done.
os._exit(0)

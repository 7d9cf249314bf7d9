"""Every `lincorr` command: the system it belongs to, the module that adds its options, and its line in `lincorr --help`.

The command modules import torch and the defaults of their studies while they add their options, which takes seconds.
With this table `lincorr --help` lists every command without them, and a command builds only its own module's options.
"""

from __future__ import annotations

__all__ = ["SYSTEMS", "HELP", "MODULE"]

# `lincorr --help` lists the commands by the system they belong to, in this order; each module of `lincorr.cli` named here
# has an `add_commands(commands)` that adds its commands, in the order given.
SYSTEMS: tuple[tuple[str, tuple[tuple[str, dict[str, str]], ...]], ...] = (
    ("correlation (Peng et al.: W between two prompts' logits)", (
        ("core", {
            "demo": "City->Country on the default model, with a heatmap and JSON",
            "fit": "fit and score W between two prompts",
        }),
        ("studies", {
            "matrix": "label-wise r, instance-wise r and label-wise std for every prompt pair",
            "precision": "Hit@Top-N of W against reference pairs, ols and ridge side by side",
            "lre": "W precision (Table 2's Hit@Top-N, ols and ridge-std) on the 47 LRE relations, by relation type",
            "cases": "top influenced / influencing words of W (Tables 3, 15, 16, 17)",
            "resilience": "fit W on one model, evaluate it on another checkpoint",
            "scale": "correlation and W precision across models (Fig. 4)",
        }),
    )),
    ("training studies (Peng et al. §4-6)", (
        ("training", {
            "generalize": "teach fresh entities source facts; does the target answer follow (Table 5)?",
            "diagnose": "per edited fact: W[s,ref], W[s,gen], priors, and why it failed (Table 6, Fig. 5)",
            "subwords": "correlation, precision and generalization by token category (Table 18)",
            "gradcorr": "one optimiser step on source facts: does dS @ W predict dT (Table 4)?",
            "predict-edit": "predict, without training, what teaching 'SOURCE(subject) = VALUE' does to TARGET",
        }),
        ("ablation", {
            "ablate": "the vocabulary ablation of §6 (Table 7)",
        }),
    )),
    ("vector arithmetic (Merullo et al.)", (
        ("mechanisms", {
            "lens": "logit lens over a task's few-shot prompts: argument and answer reciprocal rank per layer",
            "ovector": "apply a task's o-vector (FFN output of solved prompts) to contexts that do not ask for the task, with controls",
            "ffn-ablate": "ablate every FFN from a layer on: accuracy on the task and on its extractive control",
            "ovector-w": "ours: the capitals o-vector's effect on capital logits against lincorr's W for country -> capital",
        }),
    )),
    ("extractive structures (Feng et al.)", (
        ("extractive", {
            "extractive": "extractive structures: OCR on two-hop facts, scores, freezing, ordering, grafting",
        }),
    )),
    ("ripple effects (beyond the papers)", (
        ("ripple", {
            "ripple": "before each edit of a RippleEdits file, predict which implications move (W, GradSim, CLaRE-style, the "
                      "prior); make the edits and benchmark the predictors",
        }),
    )),
    ("reproduction", (
        ("reproduce", {
            "reproduce": "run a paper's tables and figures as claims, each tested: reproduced, not reproduced, inconclusive or not "
                         "applicable",
        }),
    )),
    ("registry", (
        ("registry", {
            "templates": "list the registry's prompt templates",
            "domains": "how each domain survives a model's tokenizer",
            "references": "list the reference relations",
            "tasks": "list the relational tasks of the vector-arithmetic studies (lens, ovector, ffn-ablate)",
        }),
    )),
    ("report", (
        ("report", {
            "report": "an interactive HTML report (no network needed to open it) of one or more run directories",
        }),
    )),
    ("models", (
        ("models", {
            "models": "list the bundled models: what each is, its license and packages, whether it is installed and converted, "
                      "and the memory it needs",
        }),
    )),
    ("cache", (
        ("cache", {
            "cache": "list, size or clear the cache of converted models, logit tables, study rows and fine-tuned checkpoints",
        }),
    )),
)

HELP = {name: line for _, modules in SYSTEMS for _, commands in modules for name, line in commands.items()}
MODULE = {name: module for _, modules in SYSTEMS for module, commands in modules for name in commands}

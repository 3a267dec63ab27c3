"""Trinity-RFT's names that rfthpc lacks (not built yet, or outside it): what each is, and what comes closest.

One table for every place a config names something from one of Trinity-RFT's registries (`algorithm_type`,
`advantage_fn`, `policy_loss_fn`, `entropy_loss_fn`, `sample_strategy`, a taskset's `default_workflow_type`):
each lookup asks `not_built` before calling a name unknown, so that a Trinity-RFT config is told, in one line,
what the feature is and what to use instead. A Trinity-RFT plugin class named by its module path
(`examples.bots.reward.Class`, as Trinity's registries accept) is recognised in these registries too, and in
`kl_loss_fn` / `kl_penalty_fn` and `default_reward_fn_type`; a plugin workflow named so runs
(`rfthpc.workflows.trinity_plugin`).

Workflows and reward functions that need a simulator or service rfthpc does not ship (ALFWorld, OpenJudge, ...)
are outside rfthpc, not waiting to be built: `WORKFLOWS_ELSEWHERE` and `REWARDS_ELSEWHERE` say why, with the
alternative.
"""

from __future__ import annotations

from dataclasses import dataclass

ALGORITHM = "algorithm"
ADVANTAGE = "advantage function"
POLICY_LOSS = "policy loss"
ENTROPY_LOSS = "entropy loss"
SAMPLE_STRATEGY = "sample strategy"
WORKFLOW = "workflow"
KL = "KL estimator"
REWARD = "reward function"
"""The kinds of name, as rfthpc's registries call them (`Registry.kind`)."""

MULTIMODAL = "images and videos (multimodal data) are not supported: rfthpc trains text-only models; remove it"


@dataclass(frozen=True)
class NotBuilt:
    """A Trinity-RFT feature rfthpc lacks."""

    what: str
    """What it does, as a clause after "it" ("trains each call ...")."""
    instead: str
    """The closest working setting in rfthpc, and what differs from the feature."""


_TEACHER_IN_TRAINER = ("algorithm_type: on_policy_distill with the taskset's own workflow (math_workflow for a reward "
                       "beside it) and the teacher as explorer.teacher_model (an auxiliary model the explorer has "
                       "score each sample) or model.teacher_model_path (loaded in the trainer): the explorer or the "
                       "trainer scores each sampled token, not the workflow")
NOT_BUILT: dict[str, dict[str, NotBuilt]] = {
    ALGORITHM: {},
    ADVANTAGE: {
        "clipv": NotBuilt(
            "takes GRPO's advantage and leaves out of the step the negative-advantage tokens whose entropy-change "
            "estimate lies more than mu standard deviations above the batch's, at most max_frac of the tokens "
            "(Clip_V)",
            "advantage_fn: clipb (Clip_V's sibling from the same paper), which leaves out the negative-advantage "
            "tokens whose entropy signal p(H + log p) lies more than mu standard deviations below the batch's "
            "mean, with no cap on how many"),
    },
    POLICY_LOSS: {
        "sft_is": NotBuilt("is CHORD's SFT loss weighted by the token's probability p, as an SFT stage's loss",
                           "policy_loss_fn: sft (unweighted) for an sft stage; CHORD's p(1 - p) weighting of expert "
                           "rows beside the rollouts is mix_chord's enable_phi_function"),
        "sft_phi": NotBuilt("is CHORD's SFT loss weighted by p(1-p) per token, as an SFT stage's loss",
                            "policy_loss_fn: sft (unweighted) for an sft stage; the same weighting of expert rows "
                            "beside the rollouts is mix_chord's enable_phi_function"),
    },
    WORKFLOW: {
        **dict.fromkeys(
            ("agentscope_reactv2_math_workflow", "agentscope_reactv2_gsm8k_workflow",
             "agentscopev0_react_math_workflow"),
            NotBuilt("runs a ReAct agent written for AgentScope 0.x, whose agent and model classes AgentScope 1.x "
                     "replaced",
                     "agentscope_react_math_workflow (the same math agent with a Python tool, on AgentScope 1.x) or "
                     "agentscope_react_workflow (docs/agents.md)")),
        "RAFT_baseline_countdown_workflow": NotBuilt(
            "is the R3L examples' RAFT baseline on Countdown (reach a target number from given numbers with + - * /): "
            "it samples answers with R3L's prompts and scores them for the raft algorithm",
            "math_workflow with default_reward_fn_type: countdown_reward under algorithm_type: raft (the raft "
            "advantage keeps each group's best responses)"),
        "RAFT_baseline_dapo_workflow": NotBuilt(
            "is the R3L examples' RAFT baseline on DAPO-Math: it samples answers with R3L's prompts and scores them "
            "for the raft algorithm",
            "math_dapo_workflow (DAPO's `Answer:` line) under algorithm_type: raft"),
        "bots_math_boxed_workflow": NotBuilt(
            "is BOTS's math_boxed_workflow: prompts already chat messages, scored by BOTS's own boxed-answer "
            "comparison with a format penalty for a missing think block",
            "math_boxed_workflow with the taskset's prompt_type: messages (accuracy of the boxed answer, compared "
            "symbolically)"),
        "learn2ask_workflow": NotBuilt(
            "trains a doctor model to ask the next question of a recorded consultation or to stop (Learn2Ask): the "
            "stop-or-continue decision is checked against the record, and a judge model (an auxiliary model) "
            "scores the question's content and format against the information still missing",
            "rubric_judge_workflow, where an auxiliary model grades each response against the task's rubric"),
        "medicine_ruler_workflow": NotBuilt(
            "answers medical questions, a judge model (an auxiliary model) scoring the group's responses against "
            "each other as RULER does",
            "math_ruler_workflow (RULER's group ranking by an auxiliary judge, with its math prompt) or "
            "rubric_judge_workflow (each response graded alone against a rubric)"),
        "on_policy_distill_workflow": NotBuilt(
            "samples the student's responses and asks a teacher (an auxiliary model) for its log-probability "
            "of each of their tokens, for the on_policy_distill and jsd algorithms", _TEACHER_IN_TRAINER),
        "on_policy_distill_math_workflow": NotBuilt(
            "is on_policy_distill_workflow with a math reward recorded beside the teacher's log-probabilities (read "
            "as math_boxed_workflow with explorer.teacher_model where explorer.auxiliary_models[0] names the "
            "teacher)", _TEACHER_IN_TRAINER),
    },
}
"""Per kind, each Trinity-RFT name rfthpc has not built yet (docs/migration.md, "Trinity-RFT's example configs")."""


_PLUGIN_BASES = {ALGORITHM: "AlgorithmType", ADVANTAGE: "AdvantageFn", POLICY_LOSS: "PolicyLossFn",
                 ENTROPY_LOSS: "EntropyLossFn", KL: "KLFn", SAMPLE_STRATEGY: "SampleStrategy", REWARD: "RewardFn"}
"""The Trinity-RFT class a plugin of each kind subclasses (plugin workflows run: `rfthpc.workflows.trinity_plugin`)."""

_PORT = {
    ALGORITHM: "choose the closest built-in algorithm_type and name your own functions in advantage_fn / "
               "policy_loss_fn as 'module:function'",
    SAMPLE_STRATEGY: "remove it: rfthpc's sample strategies are default (experience in commit order) and mix "
                     "(expert rows beside the rollouts)",
}
"""How to carry a plugin of each kind over; other kinds: as an rfthpc function of that kind."""


def is_module_path(name: str) -> bool:
    """Whether `name` is a dotted module path (`pkg.module.Class`, Trinity-RFT's way to name a plugin class)
    rather than a built-in name, `module:function` or `file.py:function`."""
    return "." in name and ":" not in name and "/" not in name and not name.endswith(".py")


def not_built(kind: str, name: str) -> str | None:
    """The one-line refusal of `name` as a `kind` (one of NOT_BUILT's kinds): a Trinity-RFT name rfthpc has
    not built yet, or a Trinity-RFT plugin class named by its module path; None for any other name."""
    found = NOT_BUILT.get(kind, {}).get(name)
    if found is not None:
        return (f"{name!r} is a Trinity-RFT {kind} that rfthpc has not built yet: it {found.what}; closest in "
                f"rfthpc: {found.instead}")
    if kind in _PLUGIN_BASES and is_module_path(name):
        port = _PORT.get(kind, f"write it as an rfthpc {kind} and name that as 'module:function'")
        return (f"{name!r} names a Trinity-RFT plugin class by its module path; rfthpc has not built it and cannot "
                f"run Trinity-RFT's classes (a subclass of its {_PLUGIN_BASES[kind]}, importing trinity): {port}")
    return None


REWARDS_ELSEWHERE = {
    "rm_gallery_reward": "calls RM-Gallery, which is not part of rfthpc; score with a reward model served as an "
                         "auxiliary model (math_rm_workflow) or an LLM judge (rubric_judge_workflow), or name your "
                         "own function as module:function",
}


OPENJUDGE = ("is one of Trinity-RFT's OpenJudge graders, which ask a judge model behind an outside "
             "OpenAI-compatible API (its reward_fn_args name the model and the environment variables holding "
             "the API's address and key); rfthpc's explorers call no outside service: remove it with its "
             "reward_fn_args, and judge with a model served as an auxiliary model (explorer.auxiliary_models) "
             "through math_rm_workflow or rubric_judge_workflow, or name your own function as module:function")
REWARDS_ELSEWHERE.update(dict.fromkeys(("openjudge_reward", "trajectory_accuracy_grader_reward",
                                        "openjudge_trajectory_accuracy_reward", "openjudge_multi_grader_reward"),
                                       OPENJUDGE))
"""Trinity-RFT's reward functions that rfthpc does not have, and why with the alternative (a refusal,
reported instead of an unknown reward function)."""


_ALFWORLD = ("plays ALFWorld (household tasks in TextWorld), a simulator with its own game files that is not part "
             "of rfthpc")


_OWN_ENVIRONMENT = ("; install it beside rfthpc and write its loop as a module:function workflow, or wrap it as an "
                    "rfthpc environment for env_workflow (docs/agents.md)")


WORKFLOWS_ELSEWHERE = {
    **dict.fromkeys(("alfworld_workflow", "alfworld_workflow_v2", "step_wise_alfworld_workflow",
                     "RAFT_alfworld_workflow", "RAFT_reflect_alfworld_workflow", "RAFT_baseline_alfworld_workflow"),
                    _ALFWORLD + _OWN_ENVIRONMENT),
    **dict.fromkeys(("sciworld_workflow", "RAFT_baseline_scienceworld_workflow"),
                    "plays ScienceWorld, a Java simulator that is not part of rfthpc" + _OWN_ENVIRONMENT),
    **dict.fromkeys(("webshop_workflow", "RAFT_baseline_webshop_workflow"),
                    "plays WebShop, a web shop served with its product index, which is not part of rfthpc"
                    + _OWN_ENVIRONMENT),
    "simple_mm_workflow": "answers questions about images: " + MULTIMODAL,
    "agentopia_workflow": "runs an AgentOpia agent in AppWorld, served as an environment service (taskset "
                          "storage_type: env_service), which is not part of rfthpc" + _OWN_ENVIRONMENT,
    "bcp_simple_react_workflow": "runs a ReAct search agent on BrowseComp-Plus, searching its document index (a "
                                 "BM25 or embedding searcher over the BrowseComp-Plus corpus), which is not part of "
                                 "rfthpc" + _OWN_ENVIRONMENT,
    "intercode_sql_workflow": "runs each SQL query in InterCode's MySQL environment, a Docker container, which "
                              "rfthpc's explorers do not start" + _OWN_ENVIRONMENT,
    "agentscope_v1_react_search_workflow": "runs an AgentScope ReAct agent that searches the web through an outside "
                                           "search service, which compute nodes without internet cannot reach; give "
                                           "your own search tool to an AgentScope agent with agent_workflow "
                                           "(docs/agents.md)",
}
"""Trinity-RFT's workflows that need a simulator or service rfthpc does not ship, and why with the
alternative (a refusal, reported instead of an unknown workflow)."""

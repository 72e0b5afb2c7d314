"""Replays reported curves through Optuna's own pruners and prints which
trials they stop, and at which step: the reference for GPUPlane's ASHA and
Hyperband (server/tests/server/sweep_pruner.rs sends the curves on stdin).

The input is {"key", "goal": "min"|"max", "stop": an EarlyStop as the API
writes it, "events": [{"trial", "start": true}, {"trial", "step", "value"
(null: NaN)} or {"trial", "finish": final value}]}; trials start in number
order.
"""

import json
import sys

import optuna


def pruner_for(stop):
    if stop["type"] == "asha":
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=stop["min_step"] if stop["min_step"] is not None else "auto",
            reduction_factor=stop["reduction_factor"],
            min_early_stopping_rate=stop["min_early_stopping_rate"],
            bootstrap_count=stop["bootstrap_count"],
        )
    return optuna.pruners.HyperbandPruner(
        min_resource=stop["min_step"],
        max_resource=stop["max_step"],
        reduction_factor=stop["reduction_factor"],
        bootstrap_count=stop["bootstrap_count"],
    )


def main():
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    case = json.load(sys.stdin)
    study = optuna.create_study(
        study_name=case["key"],
        direction="minimize" if case["goal"] == "min" else "maximize",
        pruner=pruner_for(case["stop"]),
    )
    trials, ended, pruned = {}, set(), []
    for event in case["events"]:
        number = event["trial"]
        if "start" in event:
            trials[number] = study.ask()
            assert trials[number].number == number, "trials must start in number order"
            continue
        if number in ended:
            continue
        trial = trials[number]
        if "finish" in event:
            study.tell(trial, event["finish"])
            ended.add(number)
            continue
        value = float("nan") if event["value"] is None else event["value"]
        trial.report(value, event["step"])
        if trial.should_prune():
            pruned.append([number, event["step"]])
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            ended.add(number)
    json.dump({"optuna": optuna.__version__, "pruned": pruned}, sys.stdout)


if __name__ == "__main__":
    main()

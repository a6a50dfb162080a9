"""Every contract restates the goal: an agent never has to remember what the work is for."""

import json

import jsonschema


def test_contract_carries_objective_and_criteria(loopx):
    long = "Analyze data, run models, and produce a report. " * 40
    goal = loopx("project_prompt", "create", "--title", "Revenue", "--description", long,
                 "--criterion", "report names the top three drivers", "--criterion", "numbers reconcile",
                 "--json").json["id"]
    loopx("project_prompt", "criterion", "--goal-id", goal, "--number", "2")
    schema = json.loads(loopx("schema", "contract").out)
    for decision_args in ((), ("--dry-run",)):
        out = loopx("quota", "should-run", "--goal-id", goal, *decision_args, "--json").json
        contract = out["interaction_contract"]
        jsonschema.validate(out, schema)
        objective = contract["agent_channel"]["objective"]
        assert objective["title"] == "Revenue"
        assert long.startswith(objective["description"].rstrip("…. ")[:300])
        assert len(objective["description"]) <= 401
        assert objective["criteria"] == [{"text": "report names the top three drivers", "met": False},
                                         {"text": "numbers reconcile", "met": True}]
        assert len(json.dumps(contract)) < 3072

def test_create_and_list(loopx):
    r = loopx("project_prompt", "create", "--title", "T", "--json")
    assert r.code == 0, r
    goal = r.json
    assert loopx("project_prompt", "list", "--json").json[0]["id"] == goal["id"]

-- A registry written by LoopX before self-repair's vocabulary moved into its plugin (schema v4):
-- goal g-969266060c5e had its gate.added event deleted and repaired (capability.repaired state_rebuilt,
-- lost [3], kept the gate; accepted), goal g-3e1572339aee a stale lease released (lease_released).
PRAGMA user_version=4;
PRAGMA foreign_keys=OFF;
BEGIN TRANSACTION;
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        goal_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        at TEXT NOT NULL,
        actor TEXT NOT NULL,
        kind TEXT NOT NULL,
        body TEXT NOT NULL,
        operation_id TEXT, prev_hash TEXT, hash TEXT,
        UNIQUE (goal_id, seq));
INSERT INTO events VALUES(1,'g-969266060c5e',1,'2026-11-30T23:08:11.764553Z','user','goal.created','{"criteria":[],"description":"","parallel_runs":false,"title":"ship it"}',NULL,'0000000000000000000000000000000000000000000000000000000000000000','cdf706c3bb89f86b0bdce389e8885fa71e032b1b43332fe1e0ca8203286a415e');
INSERT INTO events VALUES(2,'g-969266060c5e',2,'2026-11-30T23:08:11.786909Z','user','todo.added','{"depends_on":[],"priority":"P2","text":"build","todo_id":"t-52e077dbd4e7"}',NULL,'cdf706c3bb89f86b0bdce389e8885fa71e032b1b43332fe1e0ca8203286a415e','2a52be584b10eaec61c8c1c9d9715d10afec87f73605f2b39d14891c3822ac5e');
INSERT INTO events VALUES(4,'g-969266060c5e',4,'2026-11-30T23:08:11.790594Z','user','evidence.added','{"evidence_id":"e-f909dc36171c","kind":"note","run_id":null,"summary":"looked"}',NULL,'8c79a1f6037422293a2327bfd843098ffd94ef46dfdd57660bb44231e85cbc8d','28c79774360b4883acf81f88b52367685e58c6eba176526de6aab8e8f13be03d');
INSERT INTO events VALUES(5,'g-3e1572339aee',1,'2026-11-30T23:08:11.792161Z','user','goal.created','{"criteria":[],"description":"","parallel_runs":false,"title":"stale lease"}',NULL,'0000000000000000000000000000000000000000000000000000000000000000','1b3ba5ea1b19696ad5322bab36983dc2cc12c0a824c65c2725d70fa4404b4571');
INSERT INTO events VALUES(6,'g-3e1572339aee',2,'2026-11-30T23:08:11.793262Z','user','todo.added','{"depends_on":[],"priority":"P2","text":"a","todo_id":"t-619cbc43c35e"}',NULL,'1b3ba5ea1b19696ad5322bab36983dc2cc12c0a824c65c2725d70fa4404b4571','4fd739af4c1efde9a22995f7c0ee76d30b9cbafa548394128a0b2328672b196f');
INSERT INTO events VALUES(7,'g-3e1572339aee',3,'2026-11-30T23:08:11.793662Z','user','todo.claimed','{"agent":"crashed-agent","epoch":1,"expires_at":"2026-11-30T23:08:12.793662Z","run_id":null,"todo_id":"t-619cbc43c35e"}',NULL,'4fd739af4c1efde9a22995f7c0ee76d30b9cbafa548394128a0b2328672b196f','7a27ae451934579f1cb9a8a47ecb4d2d73a6f9d6232808374ea918ed53bb847c');
INSERT INTO events VALUES(8,'g-969266060c5e',5,'2026-11-30T23:08:14.016056Z','capability:self_repair','capability.repaired','{"acknowledged":[4],"finding":"chain_broken","findings":["chain_broken","ledger_drift","ledger_gap"],"kept":{"gates":[{"blocks":"all","comment":null,"created_at":"2026-11-30T23:08:11.788941Z","decided_at":null,"decided_by":null,"goal_id":"g-969266060c5e","id":"x-5d102cf36aaf","requested_by":"user","scope":"production","status":"pending","title":"deploy to production?"}]},"lost":[3],"namespace":"self_repair","repair":"state_rebuilt"}',NULL,'28c79774360b4883acf81f88b52367685e58c6eba176526de6aab8e8f13be03d','ed7066f5e97758e3ebdf8b4c5a80cee771eadd8ccb49f71cb3d5ee1376082322');
INSERT INTO events VALUES(9,'g-969266060c5e',6,'2026-11-30T23:08:14.016056Z','capability:self_repair','capability.state_set','{"namespace":"self_repair","values":{"needs_user":{"at":"2026-11-30T23:08:14.016056Z","kept":{"gates":["x-5d102cf36aaf"]},"lost":[3],"message":"goal g-969266060c5e: the ledger lacked 1 gates that current state holds; the repair kept them. A user checks them (`loopx gate list`, `loopx evidence list`) and runs `loopx self-repair accept --goal-id g-969266060c5e`"}}}',NULL,'ed7066f5e97758e3ebdf8b4c5a80cee771eadd8ccb49f71cb3d5ee1376082322','7063bf5ea6cc896001ceb4f33208bcb86b13c9dc4f3b59e0178324986bff410b');
INSERT INTO events VALUES(10,'g-3e1572339aee',4,'2026-11-30T23:08:14.035300Z','capability:self_repair','capability.repaired','{"agent":"crashed-agent","expired_at":"2026-11-30T23:08:12.793662Z","finding":"stale_lease","namespace":"self_repair","repair":"lease_released","todo_id":"t-619cbc43c35e"}',NULL,'7a27ae451934579f1cb9a8a47ecb4d2d73a6f9d6232808374ea918ed53bb847c','765bc2adbfedb920abdc4b88e26bc9ee9e282f93bb3921556f29516b32394341');
INSERT INTO events VALUES(11,'g-3e1572339aee',5,'2026-11-30T23:08:14.035300Z','capability:self_repair','capability.state_set','{"namespace":"self_repair","values":{"last_fix":{"at":"2026-11-30T23:08:14.035300Z","repaired":["stale_lease"]}}}',NULL,'765bc2adbfedb920abdc4b88e26bc9ee9e282f93bb3921556f29516b32394341','2af0bb9ddcc39556bb677210187ccabeb18a20bc4d20749c11ae0acfd586205a');
INSERT INTO events VALUES(12,'g-969266060c5e',7,'2026-11-30T23:08:14.210874Z','capability:self_repair','capability.state_deleted','{"keys":["needs_user"],"namespace":"self_repair"}',NULL,'7063bf5ea6cc896001ceb4f33208bcb86b13c9dc4f3b59e0178324986bff410b','0a30e77770a01d6e3f6a1aaf26cf50e9d90d2707c113ac1097981ea92506c9a1');
INSERT INTO events VALUES(13,'g-969266060c5e',8,'2026-11-30T23:08:14.210874Z','capability:self_repair','capability.state_set','{"namespace":"self_repair","values":{"last_accept":{"at":"2026-11-30T23:08:14.210874Z","by":"user"}}}',NULL,'0a30e77770a01d6e3f6a1aaf26cf50e9d90d2707c113ac1097981ea92506c9a1','bdfe79cc758c32315a38ff2a57a5e373c6c0be269e4fb699fb93f1ab4d48683c');
CREATE TABLE operations (
        id TEXT PRIMARY KEY,
        goal_id TEXT,
        actor TEXT NOT NULL,
        request TEXT NOT NULL,
        result TEXT NOT NULL,
        at TEXT NOT NULL);
CREATE TABLE goals (
        id TEXT PRIMARY KEY,
        created_seq INTEGER NOT NULL,
        title TEXT NOT NULL,
        description TEXT NOT NULL,
        status TEXT NOT NULL,
        status_reason TEXT,
        criteria TEXT NOT NULL,
        limits TEXT NOT NULL,
        grants TEXT NOT NULL,
        parallel_runs INTEGER NOT NULL,
        revision INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL);
INSERT INTO goals VALUES('g-3e1572339aee',5,'stale lease','','open',NULL,'[]','{}','{}',0,5,'2026-11-30T23:08:11.792161Z','2026-11-30T23:08:14.035300Z');
INSERT INTO goals VALUES('g-969266060c5e',1,'ship it','','open',NULL,'[]','{}','{}',0,8,'2026-11-30T23:08:11.764553Z','2026-11-30T23:08:14.210874Z');
CREATE TABLE gates (
        id TEXT PRIMARY KEY,
        goal_id TEXT NOT NULL,
        title TEXT NOT NULL,
        scope TEXT NOT NULL,
        blocks TEXT NOT NULL,
        status TEXT NOT NULL,
        requested_by TEXT NOT NULL,
        created_at TEXT NOT NULL,
        decided_by TEXT,
        decided_at TEXT,
        comment TEXT);
INSERT INTO gates VALUES('x-5d102cf36aaf','g-969266060c5e','deploy to production?','production','all','pending','user','2026-11-30T23:08:11.788941Z',NULL,NULL,NULL);
CREATE TABLE todos (
        id TEXT PRIMARY KEY,
        goal_id TEXT NOT NULL,
        created_seq INTEGER NOT NULL,
        text TEXT NOT NULL,
        priority TEXT NOT NULL,
        depends_on TEXT NOT NULL,
        status TEXT NOT NULL,
        note TEXT,
        claim_agent TEXT,
        claim_run_id TEXT,
        claim_expires_at TEXT,
        epoch INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL);
INSERT INTO todos VALUES('t-619cbc43c35e','g-3e1572339aee',6,'a','P2','[]','open',NULL,NULL,NULL,NULL,1,'2026-11-30T23:08:11.793262Z','2026-11-30T23:08:14.035300Z');
INSERT INTO todos VALUES('t-52e077dbd4e7','g-969266060c5e',2,'build','P2','[]','open',NULL,NULL,NULL,NULL,0,'2026-11-30T23:08:11.786909Z','2026-11-30T23:08:11.786909Z');
CREATE TABLE actions (
        goal_id TEXT NOT NULL,
        name TEXT NOT NULL,
        argv TEXT NOT NULL,
        source TEXT NOT NULL,
        created_at TEXT NOT NULL, gate_id TEXT,
        PRIMARY KEY (goal_id, name));
CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        goal_id TEXT NOT NULL,
        agent TEXT NOT NULL,
        status TEXT NOT NULL,
        contract_id TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        opened_at TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        finished_at TEXT,
        outcome TEXT,
        tokens INTEGER NOT NULL,
        cost REAL NOT NULL,
        handoff TEXT);
CREATE TABLE contracts (
        id TEXT PRIMARY KEY,
        goal_id TEXT NOT NULL,
        run_id TEXT,
        fingerprint TEXT NOT NULL,
        issued_at TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        document TEXT NOT NULL);
CREATE TABLE evidence (
        id TEXT PRIMARY KEY,
        goal_id TEXT NOT NULL,
        run_id TEXT,
        kind TEXT NOT NULL,
        summary TEXT NOT NULL,
        actor TEXT NOT NULL,
        created_at TEXT NOT NULL,
        data TEXT,
        file_path TEXT,
        file_sha256 TEXT);
INSERT INTO evidence VALUES('e-f909dc36171c','g-969266060c5e',NULL,'note','looked','user','2026-11-30T23:08:11.790594Z',NULL,NULL,NULL);
CREATE TABLE rewards (
        id TEXT PRIMARY KEY,
        goal_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        score REAL NOT NULL,
        comment TEXT,
        author TEXT NOT NULL,
        created_at TEXT NOT NULL);
CREATE TABLE capability_state (
        goal_id TEXT NOT NULL,
        namespace TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (goal_id, namespace, key));
INSERT INTO capability_state VALUES('g-3e1572339aee','self_repair','last_fix','{"at": "2026-11-30T23:08:14.035300Z", "repaired": ["stale_lease"]}','2026-11-30T23:08:14.035300Z');
INSERT INTO capability_state VALUES('g-969266060c5e','self_repair','last_accept','{"at": "2026-11-30T23:08:14.210874Z", "by": "user"}','2026-11-30T23:08:14.210874Z');
CREATE TABLE goal_summary (
        goal_id TEXT PRIMARY KEY,
        status TEXT NOT NULL,
        created_seq INTEGER NOT NULL,
        lane INTEGER NOT NULL,
        attention TEXT NOT NULL,
        run_expires TEXT);
INSERT INTO goal_summary VALUES('g-3e1572339aee','open',5,1,'',NULL);
INSERT INTO goal_summary VALUES('g-969266060c5e','open',1,2,'gate_pending',NULL);
CREATE TABLE summary_counts (
        key TEXT NOT NULL,
        shard INTEGER NOT NULL,
        n INTEGER NOT NULL,
        PRIMARY KEY (key, shard));
INSERT INTO summary_counts VALUES('open',0,2);
INSERT INTO summary_counts VALUES('paused',0,0);
INSERT INTO summary_counts VALUES('closed',0,0);
INSERT INTO summary_counts VALUES('attention',0,1);
CREATE TABLE goal_heads (
        goal_id TEXT PRIMARY KEY,
        seq INTEGER NOT NULL,
        head_hash TEXT,
        state_digest TEXT NOT NULL);
INSERT INTO goal_heads VALUES('g-969266060c5e',8,'bdfe79cc758c32315a38ff2a57a5e373c6c0be269e4fb699fb93f1ab4d48683c','1e42ae22799dedb2b3dedb5b814beca8128c30681db4827baac8759b953a227d');
INSERT INTO goal_heads VALUES('g-3e1572339aee',5,'2af0bb9ddcc39556bb677210187ccabeb18a20bc4d20749c11ae0acfd586205a','1c933623b74f40f5325243c40575165c5c4d01c83cefd2703a1b62d5556033a5');
DELETE FROM sqlite_sequence;
INSERT INTO sqlite_sequence VALUES('events',13);
CREATE INDEX goals_by_status ON goals (status, created_seq);
CREATE INDEX goals_by_created ON goals (created_seq);
CREATE INDEX gates_by_goal ON gates (goal_id, status);
CREATE INDEX todos_by_goal ON todos (goal_id, status);
CREATE INDEX runs_by_goal ON runs (goal_id, status, opened_at);
CREATE INDEX contracts_by_run ON contracts (run_id);
CREATE INDEX contracts_by_goal ON contracts (goal_id);
CREATE INDEX evidence_by_goal ON evidence (goal_id, created_at);
CREATE INDEX evidence_by_run ON evidence (run_id);
CREATE INDEX rewards_by_goal ON rewards (goal_id, created_at);
CREATE INDEX rewards_by_run ON rewards (run_id);
CREATE INDEX goal_summary_by_lane ON goal_summary (lane, created_seq);
CREATE INDEX goal_summary_by_created ON goal_summary (created_seq);
CREATE INDEX goal_summary_by_expiry ON goal_summary (run_expires);
CREATE TRIGGER goal_summary_counted_insert AFTER INSERT ON goal_summary BEGIN UPDATE summary_counts SET n = n + 1 WHERE shard = 0 AND (key = NEW.status OR (key = 'attention' AND NEW.lane = 2)); END;
CREATE TRIGGER goal_summary_counted_delete AFTER DELETE ON goal_summary BEGIN UPDATE summary_counts SET n = n - 1 WHERE shard = 0 AND (key = OLD.status OR (key = 'attention' AND OLD.lane = 2)); END;
CREATE TRIGGER goal_summary_counted_update AFTER UPDATE OF status, lane ON goal_summary WHEN OLD.status <> NEW.status OR OLD.lane <> NEW.lane BEGIN UPDATE summary_counts SET n = n - 1 WHERE shard = 0 AND (key = OLD.status OR (key = 'attention' AND OLD.lane = 2)); UPDATE summary_counts SET n = n + 1 WHERE shard = 0 AND (key = NEW.status OR (key = 'attention' AND NEW.lane = 2)); END;
COMMIT;

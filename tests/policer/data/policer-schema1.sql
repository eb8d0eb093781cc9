-- A policer database of schema version 1, written by the first release's store (xtc/policer/store.py at f9d31bf)
-- and dumped with sqlite3's iterdump(); test_policer_store.py upgrades it in place.
BEGIN TRANSACTION;
CREATE TABLE actions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    t_unix_s REAL NOT NULL,
    kind TEXT NOT NULL,
    actor TEXT NOT NULL,
    router TEXT,
    vr TEXT,
    detail TEXT NOT NULL
);
INSERT INTO "actions" VALUES(1,1700000002.0,'router_registered','api:token-1','r1',NULL,'{"endpoint": "tcp://127.0.0.1:7001", "capacity_pps": 100000.0, "control_mode": "auto", "curve": false}');
INSERT INTO "actions" VALUES(2,1700000004.0,'router_registered','api:token-1','r2',NULL,'{"endpoint": "tcp://127.0.0.1:7002", "capacity_pps": 60000.0, "control_mode": "manual", "curve": true}');
INSERT INTO "actions" VALUES(3,1700000005.0,'network_created','api:token-1',NULL,NULL,'{"network": "gold"}');
INSERT INTO "actions" VALUES(4,1700000006.0,'sla_set','api:token-1',NULL,NULL,'{"network": "gold", "sla": {"min_pps": 20000.0, "max_pps": 80000.0, "weight": 2.0}}');
INSERT INTO "actions" VALUES(5,1700000008.0,'vr_appeared','policer','r1','a1','{}');
INSERT INTO "actions" VALUES(6,1700000009.0,'vr_appeared','policer','r1','a2','{}');
INSERT INTO "actions" VALUES(7,1700000010.0,'vr_network','api:token-1','r1','a1','{"network": "gold"}');
INSERT INTO "actions" VALUES(8,1700000011.0,'manual_setpoint','api:token-1','r1','a2','{"setpoint_pps": 12345.678}');
INSERT INTO "actions" VALUES(9,1700000012.0,'policy_changed','api:token-1',NULL,NULL,'{"policy": "allocation", "enabled": true, "target_fraction": 0.85, "min_setpoint_pps": 1000.0, "demand_headroom": 1.2, "hysteresis": 0.05}');
INSERT INTO "actions" VALUES(10,1700000013.0,'router_removed','api:token-1','r2',NULL,'{}');
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO "meta" VALUES('schema_version','1');
CREATE TABLE networks (
    name TEXT PRIMARY KEY,
    description TEXT NOT NULL DEFAULT '',
    sla_min_pps REAL,
    sla_max_pps REAL,
    sla_weight REAL
);
INSERT INTO "networks" VALUES('gold','paying customers',20000.0,80000.0,2.0);
CREATE TABLE routers (
    name TEXT PRIMARY KEY,
    endpoint TEXT NOT NULL,
    capacity_pps REAL NOT NULL,
    control_mode TEXT NOT NULL DEFAULT 'auto',
    curve_server_key TEXT,
    status TEXT NOT NULL DEFAULT 'unknown',
    last_seen_unix_s REAL,
    last_error TEXT,
    control_on INTEGER NOT NULL DEFAULT 0,
    activation_pending_since_s REAL,
    demand_pps REAL,
    created_unix_s REAL NOT NULL
);
INSERT INTO "routers" VALUES('r1','tcp://127.0.0.1:7001',100000.0,'auto',NULL,'unknown',NULL,NULL,0,NULL,NULL,1700000001.0);
INSERT INTO "routers" VALUES('r2','tcp://127.0.0.1:7002',60000.0,'manual','KKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKKK','removed',NULL,NULL,0,NULL,NULL,1700000003.0);
CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO "settings" VALUES('allocation','{"enabled": true, "target_fraction": 0.85, "min_setpoint_pps": 1000.0, "demand_headroom": 1.2, "hysteresis": 0.05}');
CREATE TABLE vrs (
    router TEXT NOT NULL REFERENCES routers(name),
    name TEXT NOT NULL,
    network TEXT REFERENCES networks(name),
    present INTEGER NOT NULL DEFAULT 1,
    state TEXT NOT NULL DEFAULT 'inactive',
    daemon_setpoint_pps REAL,
    measured_pps REAL,
    offered_pps REAL,
    cap_percent REAL,
    last_seen_unix_s REAL,
    manual_setpoint_pps REAL,
    derived_setpoint_pps REAL,
    wanted_state TEXT,
    wanted_setpoint_pps REAL,
    punish_level INTEGER NOT NULL DEFAULT 0,
    punish_bad_since_s REAL,
    punish_good_since_s REAL,
    punish_base_pps REAL,
    PRIMARY KEY (router, name)
);
INSERT INTO "vrs" VALUES('r1','a1','gold',1,'active',30000.5,29990.25,60000.0,12.5,1700000007.0,NULL,NULL,NULL,NULL,0,NULL,NULL,NULL);
INSERT INTO "vrs" VALUES('r1','a2',NULL,1,'inactive',NULL,NULL,NULL,NULL,1700000007.0,12345.678,NULL,NULL,NULL,0,NULL,NULL,NULL);
CREATE INDEX actions_router ON actions(router, vr);
CREATE INDEX actions_kind ON actions(kind);
DELETE FROM "sqlite_sequence";
INSERT INTO "sqlite_sequence" VALUES('actions',10);
COMMIT;

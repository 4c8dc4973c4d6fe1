-- 0010_take_key_plans: plan the dispatch hot path as the key lookups it is, whatever the statistics say.
--
-- hookgate_delivery_take (0008) runs with forced generic plans, and a generic plan is made once per session
-- from the statistics of that moment. A connection that first ran it while the tables were small kept
-- hash joins over sequential scans of agent_task, agent_slot and sometimes webhook_delivery until the
-- next ANALYZE of those tables: seen with auto_explain in bench/dispatch.py, where the tables grow from
-- empty to ~10,000 rows in half a minute, and the same happens to a young production database. Every
-- statement in these functions reads rows by primary key or by an index prefix, so nested loops over
-- index scans are right at any size; the settings below hold only while the functions run.
ALTER FUNCTION hookgate_delivery_take(integer, double precision, uuid, integer, timestamptz, integer,
                                      double precision, text, integer, double precision, double precision)
    SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;
ALTER FUNCTION hookgate_slots_take(uuid, integer)
    SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;

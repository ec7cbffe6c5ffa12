-- The node a feed head was positioned on: the cluster's system identifier
-- and the WAL timeline (event horizonSQL). A restore the transaction ids do
-- not reveal changes it: pg_dump into another cluster (even one whose
-- counter is ahead of the source's), a point-in-time recovery or a
-- replica's promotion (a new timeline). The feed then starts a new epoch,
-- as it does when its ids are not the node's. NULL on heads written before
-- this migration, or by the release before it: the next positioning
-- records the node without a new epoch. Adding a column without a default
-- rewrites nothing; the previous release does not name it.
ALTER TABLE event_feed_heads ADD COLUMN node text;

-- An operation may opt in to carrying its stored outcome body in its tokens'
-- events (the feed and webhooks). The choice is copied onto each token at
-- issue, like the rest of its policy (003), and the body onto the event that
-- stored it. Off by default: an outcome may hold what other systems should
-- not see.
ALTER TABLE operations ADD COLUMN event_outcome boolean NOT NULL DEFAULT false;
ALTER TABLE tokens ADD COLUMN event_outcome boolean NOT NULL DEFAULT false;
ALTER TABLE token_events ADD COLUMN outcome_body bytea;

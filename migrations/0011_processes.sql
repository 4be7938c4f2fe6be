-- The syncd processes serving this database, each refreshing its row every
-- few seconds, so that each can take its share of the rate limits (README,
-- "Scaling out"). Rows of processes that stopped without saying so age out.
CREATE TABLE syncd_processes (
    id   text        PRIMARY KEY,
    seen timestamptz NOT NULL DEFAULT now()
);

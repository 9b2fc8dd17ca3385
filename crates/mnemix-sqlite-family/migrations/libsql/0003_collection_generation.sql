-- libSQL's collections get SQLite's `generation`: it changes with every write to the
-- collection's vectors, so the matrix of a small scope held in a process is known current
-- (even when another process wrote) and its searches read no rows.
ALTER TABLE collections ADD COLUMN generation INTEGER NOT NULL DEFAULT 0;

-- Attempts a delivery made before its last replay. A replay gives the
-- delivery a fresh retry budget (`attempts` back to 0) while its attempt
-- numbers go on where they stopped: attempt n is recorded as
-- `earlier_attempts + n`. A column with a constant default: existing rows
-- read 0, and a binary that does not know the column still writes rows.
ALTER TABLE hookgate_deliveries ADD COLUMN earlier_attempts INTEGER NOT NULL DEFAULT 0;

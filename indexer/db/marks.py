"""Dirty marks shared by the stages that write them (load, replay, rules) and the one that claims them (rules)."""

# An epoch mark for an epoch-level change: it widens an escrow-level mark of the same epoch (rules.dirty_epoch.whole)
WHOLE_EPOCH = "(epoch_index) DO UPDATE SET whole = true"

# A mark that already exists is touched, not skipped (DO NOTHING takes no lock): the touch locks it until the
# marking transaction commits, so a concurrent claim (FOR UPDATE SKIP LOCKED) passes it over instead of deleting a
# mark whose new rows it cannot see yet, and a claim that deleted it first makes the marker wait and insert anew.
ESCROW_MARK = "(escrow_id) DO UPDATE SET marked_at = excluded.marked_at"
EPOCH_MARK = "(epoch_index) DO UPDATE SET marked_at = excluded.marked_at"

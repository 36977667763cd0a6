"""Dirty marks shared by the stages that write them (load, replay, rules) and the one that claims them (rules)."""

# An epoch mark for an epoch-level change: it widens an escrow-level mark of the same epoch (rules.dirty_epoch.whole)
WHOLE_EPOCH = "(epoch_index) DO UPDATE SET whole = true"

"""What a study shows: live progress, dashboard notes, knob effects, which trials count and in what
order, knobs as observed."""

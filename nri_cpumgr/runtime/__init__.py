"""Runtime glue: NRI requests in, manager decisions out as NRI adjustments and updates."""

"""Model: scenarios (catalog), inventories, the plan, deviations from the guides, the gate policy."""

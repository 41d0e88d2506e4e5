"""Taking history back: rollback of one instant, restore to a savepoint, recovery of dead instants."""

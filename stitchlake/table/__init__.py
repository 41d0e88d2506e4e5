"""The core table: its handle (`handle.TableHandle`: config, storage, lock, timeline, file-system view) and the
transaction that takes an action from request to publish (`transaction`)."""

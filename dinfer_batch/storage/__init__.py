"""SQL storage: connections and migrations (`db`), the typed tables (`tables`)."""

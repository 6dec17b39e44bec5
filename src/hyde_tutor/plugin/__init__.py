"""What an agent plugs in: the search toolset, the tutor capabilities, the A/B experiment, the monitor, the chat turn."""

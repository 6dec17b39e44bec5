"""What any pydantic-ai agent plugs in: the search toolset and its deps, the tool failure mapping, the monitor,
and the tutor capabilities (``HydeTutor``, ``RetrieveFirst``)."""

"""The scopes an API key may hold; apart from `app.tenancy` so that the command line can offer
them without importing the service's database stack (every `margin` command builds its parser)."""

SCOPES = ("read", "train", "predict", "admin")

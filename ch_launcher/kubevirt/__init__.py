"""KubeVirt vocabulary, pure: the inbound VMI model, quantities, the api.Domain view, log format."""

"""Getting a decided push to the owner: the outbox dispatcher and the channels it sends through."""

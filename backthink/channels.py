"""`backthink.channels.verify`, kept where webhook receivers have long imported it from.

The channels live in `backthink.delivery.channels`.
"""

from backthink.delivery.channels import verify

__all__ = ["verify"]

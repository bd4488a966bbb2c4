"""`backthink.footer.parse_footer`, kept where scripts have long imported it from.

The footer grammar lives in `backthink.decision.footer`.
"""

from backthink.decision.footer import parse_footer

__all__ = ["parse_footer"]

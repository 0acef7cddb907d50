"""Binary sanity: is the wheel what it says it is, and do basic numerics hold (any release)."""

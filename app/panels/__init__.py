"""The window's panels: each shows one part of core's state and sends nothing but requests back."""

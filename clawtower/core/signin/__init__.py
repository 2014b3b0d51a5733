"""The web console's sign-ins kept in the store (issue 35): refused tokens counted in the
limiters' shared window, and signed-in browsers by the SHA-256 of their session cookie."""

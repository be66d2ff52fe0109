"""One iteration's model forwards: which columns each row recomputes, what masks are fed."""

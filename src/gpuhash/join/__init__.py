"""Joins of key arrays (join, JoinBuild, explain_join) and of tables (merge), and the join CLI.

``gpuhash.join`` as an attribute is the function; this package is reached by import
(``from gpuhash.join import api``)."""

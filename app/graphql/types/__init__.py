"""GraphQL object types, one module per concept.

The enums are registered on import of this package, before any type module can mention one:
strawberry would otherwise wrap an unregistered domain enum under its Python name.
"""

from app.graphql.types import enums as enums

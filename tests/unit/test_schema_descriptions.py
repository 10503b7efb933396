"""Every type, field, argument, input field and enum value of the schema has a description:
a frontend developer reads the API in GraphiQL, codegen output and editor tooltips
(docs/graphql/frontends.md). ``make lint-schema`` runs @graphql-eslint's rules on top."""

from __future__ import annotations

from graphql import (
    GraphQLEnumType,
    GraphQLInputObjectType,
    GraphQLInterfaceType,
    GraphQLNamedType,
    GraphQLObjectType,
    GraphQLSchema,
    build_schema,
)

from app.graphql.schema import schema

BUILT_IN = {"String", "Int", "Float", "Boolean", "ID"}


def undescribed(built: GraphQLSchema) -> list[str]:
    """Each schema element without a description, as ``Type.field(argument)``."""
    missing: list[str] = []

    def check(description: str | None, where: str) -> None:
        if not (description and description.strip()):
            missing.append(where)

    for name, named in built.type_map.items():
        if name.startswith("__") or name in BUILT_IN:
            continue
        check(named.description, name)
        missing.extend(_members(named))
    return missing


def _members(named: GraphQLNamedType) -> list[str]:
    missing: list[str] = []
    name = named.name
    if isinstance(named, GraphQLObjectType | GraphQLInterfaceType):
        for field_name, field in named.fields.items():
            if not field.description:
                missing.append(f"{name}.{field_name}")
            missing.extend(
                f"{name}.{field_name}({arg_name})"
                for arg_name, arg in field.args.items()
                if not arg.description
            )
    elif isinstance(named, GraphQLInputObjectType):
        missing.extend(f"{name}.{field_name}" for field_name, f in named.fields.items() if not f.description)
    elif isinstance(named, GraphQLEnumType):
        missing.extend(f"{name}.{value_name}" for value_name, v in named.values.items() if not v.description)
    return missing


def test_every_schema_element_is_described() -> None:
    missing = undescribed(schema._schema)
    assert not missing, f"{len(missing)} schema elements have no description:\n" + "\n".join(missing)


def test_the_check_finds_each_kind_of_gap() -> None:
    bare = build_schema(
        """
        "described" type Query { "described" a(x: Int): E  b("described" y: I): Int }
        "described" enum E { "described" ONE TWO }
        "described" input I { z: Int }
        type T { "described" c: Int }
        """
    )
    assert undescribed(bare) == ["Query.a(x)", "Query.b", "E.TWO", "I.z", "T"]

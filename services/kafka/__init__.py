"""The only package that imports aiokafka: clients, admin, transactions, dead letters."""

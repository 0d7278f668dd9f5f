/* edges_lib.c - libedges.so for edges.c's plt mode: a function small enough that a fair
 * share of the time goes to the PLT stub that calls it. */
int edge_tiny(int x)
{
    return x ^ (x >> 3);
}

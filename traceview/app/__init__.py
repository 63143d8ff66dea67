"""The Streamlit web app's pages (`streamlit run app.py`): widgets and plotly charts over the analyze document."""
